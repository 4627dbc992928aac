package idstrategy_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
)

// placed is the body of the envelope tests' messages.
type placed struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

func placedOrderID(p placed) string { return p.OrderID }

type placedMsg = *dedup.Message[placed]

// amqpTable is a delivery.Header over an AMQP headers table (amqp091.Table is a
// map[string]any), as the RabbitMQ adapter wraps it: values that are not
// strings are given as their text.
type amqpTable map[string]any

func (t amqpTable) Get(name string) (string, bool) {
	v, ok := t[name]
	if !ok {
		return "", false
	}
	return amqpText(v), true
}

func (t amqpTable) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for k, v := range t {
			if !yield(k, amqpText(v)) {
				return
			}
		}
	}
}

func amqpText(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return fmt.Sprint(v)
}

// kafkaHeaders is a delivery.Header over Kafka record headers (kafka-go's
// []kafka.Header), as the Kafka adapter wraps them: a list, in which a key
// may repeat, of byte values.
type kafkaHeaders []struct {
	Key   string
	Value []byte
}

func (h kafkaHeaders) Get(name string) (string, bool) {
	for _, kv := range h {
		if kv.Key == name {
			return string(kv.Value), true
		}
	}
	return "", false
}

func (h kafkaHeaders) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for _, kv := range h {
			if !yield(kv.Key, string(kv.Value)) {
				return
			}
		}
	}
}

var (
	_ delivery.Header = amqpTable(nil)
	_ delivery.Header = kafkaHeaders(nil)
)

// One logical message, order ord-42 published with message id msg-7 and an
// Idempotency-Key header, as each broker's adapter fills the envelope.
const placedData = `{"order_id":"ord-42","amount":100}`

var (
	placedBody = placed{OrderID: "ord-42", Amount: 100}
	placedAt   = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
)

func jetStreamMessage() placedMsg {
	return &dedup.Message[placed]{
		Body:   placedBody,
		Data:   []byte(placedData),
		Header: delivery.MapHeader{"Nats-Msg-Id": {"msg-7"}, "Idempotency-Key": {"idem-7"}},
		ID:     "msg-7", Source: "orders.placed",
		Stream: "ORDERS", Offset: 42,
		DeliveryCount: 1, Timestamp: placedAt, Broker: "jetstream",
	}
}

func coreNATSMessage() placedMsg {
	return &dedup.Message[placed]{
		Body:   placedBody,
		Data:   []byte(placedData),
		Header: delivery.MapHeader{"Nats-Msg-Id": {"msg-7"}, "Idempotency-Key": {"idem-7"}},
		ID:     "msg-7", Source: "orders.placed",
		Broker: "nats",
	}
}

func rabbitMQMessage() placedMsg {
	return &dedup.Message[placed]{
		Body:   placedBody,
		Data:   []byte(placedData),
		Header: amqpTable{"Idempotency-Key": "idem-7", "x-delivery-count": int64(0)},
		ID:     "msg-7", Source: "orders",
		DeliveryCount: 1, Timestamp: placedAt, Broker: "rabbitmq",
	}
}

func kafkaMessage() placedMsg {
	return &dedup.Message[placed]{
		Body: placedBody,
		Data: []byte(placedData),
		Header: kafkaHeaders{
			{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
			{Key: "Idempotency-Key", Value: []byte("idem-7")},
		},
		Source: "orders", Stream: "orders", Partition: 3, Offset: 1042,
		DeliveryCount: 1, Timestamp: placedAt, Broker: "kafka",
	}
}

// brokerMessages are the same message from each broker, in a fixed order.
var brokerMessages = []struct {
	broker string
	msg    func() placedMsg
}{
	{"jetstream", jetStreamMessage},
	{"nats", coreNATSMessage},
	{"rabbitmq", rabbitMQMessage},
	{"kafka", kafkaMessage},
}

// outcome is what a strategy gives for one broker's message: an id, or an
// error matching target and containing msg.
type outcome struct {
	id     string
	target error
	msg    string
}

func gives(id string) outcome              { return outcome{id: id} }
func noKeyOutcome(msg string) outcome      { return outcome{target: dedup.ErrNoKey, msg: msg} }
func invalidKeyOutcome(msg string) outcome { return outcome{target: dedup.ErrInvalidKey, msg: msg} }

// everyBroker is the same outcome for every broker's message.
func everyBroker(o outcome) map[string]outcome {
	m := make(map[string]outcome, len(brokerMessages))
	for _, b := range brokerMessages {
		m[b.broker] = o
	}
	return m
}

// sha256Hex is prefix and the hex SHA-256 of data, computed here rather than
// by the package.
func sha256Hex(prefix, data string) string {
	sum := sha256.Sum256([]byte(data))
	return prefix + hex.EncodeToString(sum[:])
}

// The same strategy gives the same id for the same logical message whichever
// broker filled the envelope, where that broker fills the field it uses, and
// says so where it does not.
func TestMessageStrategiesAcrossBrokers(t *testing.T) {
	t.Parallel()
	const (
		noID      = `idstrategy: message id: dedup: message has no id: the message has no broker message id`
		noStream  = `idstrategy: stream sequence: dedup: message has no id: the message is not stored in a stream`
		kafkaSeq  = `idstrategy: stream sequence: dedup: invalid message id: Kafka offsets count per partition, so a topic and offset do not identify a message; use idstrategy.TopicPartitionOffset`
		noLog     = `idstrategy: topic partition offset: dedup: message has no id: the message is not stored in a log`
		noNatsHdr = `idstrategy: header "Nats-Msg-Id": dedup: message has no id: the header is missing`
	)
	// Independent of the package: the SHA-256 of the bytes, and of the
	// canonical form written out by hand.
	dataHash := sha256Hex("sha256:", placedData)
	canonHash := sha256Hex("json-sha256:", `{"amount":100,"order_id":"ord-42"}`)

	tests := []struct {
		strategy string
		key      dedup.KeyFunc[placedMsg]
		want     map[string]outcome
	}{
		{"MessageID", idstrategy.MessageID[placed](), map[string]outcome{
			"jetstream": gives("msg-7"), "nats": gives("msg-7"), "rabbitmq": gives("msg-7"), "kafka": noKeyOutcome(noID),
		}},
		{"MessageHeader Idempotency-Key", idstrategy.MessageHeader[placed]("Idempotency-Key"), everyBroker(gives("idem-7"))},
		{"MessageHeader Nats-Msg-Id", idstrategy.MessageHeader[placed]("Nats-Msg-Id"), map[string]outcome{
			"jetstream": gives("msg-7"), "nats": gives("msg-7"), "rabbitmq": noKeyOutcome(noNatsHdr), "kafka": noKeyOutcome(noNatsHdr),
		}},
		{"BodyField", idstrategy.BodyField("OrderID", placedOrderID), everyBroker(gives("ord-42"))},
		{"DataHash", idstrategy.DataHash[placed](), everyBroker(gives(dataHash))},
		{"DataCanonicalJSON", idstrategy.DataCanonicalJSON[placed](), everyBroker(gives(canonHash))},
		{"StreamSequence", idstrategy.StreamSequence[placed](), map[string]outcome{
			"jetstream": gives("ORDERS:42"), "nats": noKeyOutcome(noStream), "rabbitmq": noKeyOutcome(noStream),
			"kafka": invalidKeyOutcome(kafkaSeq),
		}},
		{"TopicPartitionOffset", idstrategy.TopicPartitionOffset[placed](), map[string]outcome{
			"jetstream": gives("ORDERS:0:42"), "nats": noKeyOutcome(noLog), "rabbitmq": noKeyOutcome(noLog),
			"kafka": gives("orders:3:1042"),
		}},
		{"FirstOf header, data hash", idstrategy.FirstOf(
			idstrategy.MessageHeader[placed]("Idempotency-Key"),
			idstrategy.DataHash[placed](),
		), everyBroker(gives("idem-7"))},
		{"FirstOf message id, position", idstrategy.FirstOf(
			idstrategy.MessageID[placed](),
			idstrategy.TopicPartitionOffset[placed](),
		), map[string]outcome{
			"jetstream": gives("msg-7"), "nats": gives("msg-7"), "rabbitmq": gives("msg-7"), "kafka": gives("orders:3:1042"),
		}},
		// A broker that refuses is an error, not a reason to move on.
		{"FirstOf stream sequence, data hash", idstrategy.FirstOf(
			idstrategy.StreamSequence[placed](),
			idstrategy.DataHash[placed](),
		), map[string]outcome{
			"jetstream": gives("ORDERS:42"), "nats": gives(dataHash), "rabbitmq": gives(dataHash),
			"kafka": invalidKeyOutcome("first of, strategy 1 of 2: stream sequence: dedup: invalid message id: Kafka offsets"),
		}},
	}
	var cases []keyCase[placedMsg]
	for _, tt := range tests {
		require.Len(t, tt.want, len(brokerMessages), "%s: one outcome per broker", tt.strategy)
		for _, b := range brokerMessages {
			want, ok := tt.want[b.broker]
			require.True(t, ok, "%s: no outcome for %s", tt.strategy, b.broker)
			cases = append(cases, keyCase[placedMsg]{
				name: tt.strategy + "/" + b.broker, key: tt.key, in: b.msg(),
				want: want.id, target: want.target, msg: want.msg,
			})
		}
	}
	runKeyCases(t, nil, cases)
}

// withMsg returns a copy of base changed by edit.
func withMsg(base func() placedMsg, edit func(m placedMsg)) placedMsg {
	m := base()
	edit(m)
	return m
}

func TestMessageStrategies(t *testing.T) {
	t.Parallel()
	messageID := idstrategy.MessageID[placed]()
	header := idstrategy.MessageHeader[placed]("Idempotency-Key")
	bodyField := idstrategy.BodyField("OrderID", placedOrderID)
	dataHash := idstrategy.DataHash[placed]()
	canonical := idstrategy.DataCanonicalJSON[placed]()
	streamSeq := idstrategy.StreamSequence[placed]()
	position := idstrategy.TopicPartitionOffset[placed]()

	runKeyCases(t, nil, []keyCase[placedMsg]{
		// Header names are matched exactly, case included, on every broker.
		{name: "header case/jetstream", key: idstrategy.MessageHeader[placed]("nats-msg-id"), in: jetStreamMessage(),
			target: dedup.ErrNoKey, msg: `idstrategy: header "nats-msg-id": dedup: message has no id: the header is missing`},
		{name: "header case/nats", key: idstrategy.MessageHeader[placed]("Nats-Msg-ID"), in: coreNATSMessage(),
			target: dedup.ErrNoKey, msg: "the header is missing"},
		{name: "header case/rabbitmq", key: idstrategy.MessageHeader[placed]("idempotency-key"), in: rabbitMQMessage(),
			target: dedup.ErrNoKey, msg: "the header is missing"},
		{name: "header case/kafka", key: idstrategy.MessageHeader[placed]("IDEMPOTENCY-KEY"), in: kafkaMessage(),
			target: dedup.ErrNoKey, msg: "the header is missing"},

		{name: "header empty", key: header, in: withMsg(kafkaMessage, func(m placedMsg) {
			m.Header = kafkaHeaders{{Key: "Idempotency-Key", Value: nil}}
		}), target: dedup.ErrNoKey, msg: `idstrategy: header "Idempotency-Key": dedup: message has no id: the header is empty`},
		{name: "header repeated: the first value", key: header, in: withMsg(kafkaMessage, func(m placedMsg) {
			m.Header = kafkaHeaders{{Key: "Idempotency-Key", Value: []byte("first")}, {Key: "Idempotency-Key", Value: []byte("second")}}
		}), want: "first"},
		{name: "header not a string on the wire", key: idstrategy.MessageHeader[placed]("x-delivery-count"), in: rabbitMQMessage(), want: "0"},
		{name: "no header at all", key: header, in: withMsg(rabbitMQMessage, func(m placedMsg) { m.Header = nil }),
			target: dedup.ErrNoKey, msg: "the header is missing"},
		{name: "header a megabyte", key: header, in: withMsg(rabbitMQMessage, func(m placedMsg) {
			m.Header = amqpTable{"Idempotency-Key": megabyte}
		}), target: dedup.ErrInvalidKey, msg: "over the limit"},
		{name: "header invalid UTF-8", key: header, in: withMsg(kafkaMessage, func(m placedMsg) {
			m.Header = kafkaHeaders{{Key: "Idempotency-Key", Value: []byte(badUTF8)}}
		}), target: dedup.ErrInvalidKey, msg: "not valid UTF-8"},

		{name: "message id at the limit", key: messageID, in: withMsg(rabbitMQMessage, func(m placedMsg) { m.ID = exactLimit }), want: exactLimit},
		{name: "message id over the limit", key: messageID, in: withMsg(rabbitMQMessage, func(m placedMsg) { m.ID = overLimit }),
			target: dedup.ErrInvalidKey, msg: "idstrategy: message id: dedup: invalid message id: the id is 513 bytes, over the limit of 512"},
		{name: "message id invalid UTF-8", key: messageID, in: withMsg(jetStreamMessage, func(m placedMsg) { m.ID = badUTF8 }),
			target: dedup.ErrInvalidKey, msg: "not valid UTF-8"},
		{name: "message id hashed when long", key: idstrategy.HashLong(messageID, 128),
			in: withMsg(rabbitMQMessage, func(m placedMsg) { m.ID = megabyte }), want: sha256Hex("sha256:", megabyte)},

		{name: "body field empty", key: bodyField, in: withMsg(kafkaMessage, func(m placedMsg) { m.Body = placed{} }),
			target: dedup.ErrNoKey, msg: `idstrategy: field "OrderID": dedup: message has no id: the field is empty`},
		{name: "body field invalid UTF-8", key: bodyField, in: withMsg(kafkaMessage, func(m placedMsg) { m.Body.OrderID = badUTF8 }),
			target: dedup.ErrInvalidKey, msg: "not valid UTF-8"},

		{name: "data empty", key: dataHash, in: withMsg(coreNATSMessage, func(m placedMsg) { m.Data = nil }),
			target: dedup.ErrNoKey, msg: "idstrategy: content hash: dedup: message has no id: the body is empty"},
		{name: "data not JSON", key: canonical, in: withMsg(coreNATSMessage, func(m placedMsg) { m.Data = []byte("ord-42") }),
			target: dedup.ErrInvalidKey, msg: "idstrategy: canonical JSON: dedup: invalid message id: at byte 0"},
		{name: "data empty, canonical", key: canonical, in: withMsg(coreNATSMessage, func(m placedMsg) { m.Data = []byte{} }),
			target: dedup.ErrNoKey, msg: "the body is empty"},

		{name: "stream sequence, partitioned", key: streamSeq, in: withMsg(jetStreamMessage, func(m placedMsg) { m.Partition = 2 }),
			target: dedup.ErrInvalidKey, msg: "the message is in partition 2 and offsets count per partition"},
		{name: "stream sequence, Kafka partition 0", key: streamSeq, in: withMsg(kafkaMessage, func(m placedMsg) { m.Partition = 0 }),
			target: dedup.ErrInvalidKey, msg: "use idstrategy.TopicPartitionOffset"},
		{name: "stream sequence, JetStream without one", key: streamSeq, in: withMsg(jetStreamMessage, func(m placedMsg) { m.Offset = 0 }),
			target: dedup.ErrNoKey, msg: "idstrategy: stream sequence: dedup: message has no id: the message has no stream sequence"},
		{name: "stream sequence, negative", key: streamSeq, in: withMsg(jetStreamMessage, func(m placedMsg) { m.Offset = -1 }),
			target: dedup.ErrInvalidKey, msg: "the offset -1 is negative"},
		{name: "stream sequence, long stream name", key: streamSeq, in: withMsg(jetStreamMessage, func(m placedMsg) { m.Stream = exactLimit }),
			target: dedup.ErrInvalidKey, msg: "over the limit of 512"},
		{name: "stream sequence, stream name invalid UTF-8", key: streamSeq, in: withMsg(jetStreamMessage, func(m placedMsg) { m.Stream = badUTF8 }),
			target: dedup.ErrInvalidKey, msg: "not valid UTF-8"},
		{name: "stream sequence, other log at 0", key: streamSeq, in: &dedup.Message[placed]{Stream: "log", Broker: "custom"}, want: "log:0"},

		{name: "position, Kafka at the start", key: position, in: withMsg(kafkaMessage, func(m placedMsg) { m.Partition, m.Offset = 0, 0 }),
			want: "orders:0:0"},
		{name: "position, topic with a colon", key: position, in: withMsg(kafkaMessage, func(m placedMsg) { m.Stream = "a:1" }),
			want: "a:1:3:1042"},
		{name: "position, JetStream without a sequence", key: position, in: withMsg(jetStreamMessage, func(m placedMsg) { m.Offset = 0 }),
			target: dedup.ErrNoKey, msg: "the message has no stream sequence"},
		{name: "position, negative partition", key: position, in: withMsg(kafkaMessage, func(m placedMsg) { m.Partition = -1 }),
			target: dedup.ErrInvalidKey, msg: "the partition -1 is negative"},
		{name: "position, negative offset", key: position, in: withMsg(kafkaMessage, func(m placedMsg) { m.Offset = -2 }),
			target: dedup.ErrInvalidKey, msg: "idstrategy: topic partition offset: dedup: invalid message id: the offset -2 is negative"},
		{name: "position, long topic", key: position, in: withMsg(kafkaMessage, func(m placedMsg) { m.Stream = exactLimit }),
			target: dedup.ErrInvalidKey, msg: "over the limit of 512"},
	})
}

// The same JSON document serialised another way by another producer: the
// canonical form is one id, the bytes are two.
func TestDataCanonicalJSONAcrossSerialisations(t *testing.T) {
	t.Parallel()
	js := jetStreamMessage()
	kafka := withMsg(kafkaMessage, func(m placedMsg) {
		m.Data = []byte("{ \"amount\": 100,\n  \"order_id\": \"ord\\u002d42\" }")
	})
	canonical := idstrategy.DataCanonicalJSON[placed]()
	a, err := canonical(js)
	require.NoError(t, err)
	b, err := canonical(kafka)
	require.NoError(t, err)
	require.Equal(t, a, b)

	dataHash := idstrategy.DataHash[placed]()
	a, err = dataHash(js)
	require.NoError(t, err)
	b, err = dataHash(kafka)
	require.NoError(t, err)
	require.NotEqual(t, a, b)
}

// A nil message and an empty one are "no id" for every strategy, never a panic.
func TestMessageStrategiesOnNothing(t *testing.T) {
	t.Parallel()
	for name, key := range map[string]dedup.KeyFunc[placedMsg]{
		"message id":             idstrategy.MessageID[placed](),
		"header \"Nats-Msg-Id\"": idstrategy.MessageHeader[placed]("Nats-Msg-Id"),
		"field \"OrderID\"":      idstrategy.BodyField("OrderID", placedOrderID),
		"content hash":           idstrategy.DataHash[placed](),
		"canonical JSON":         idstrategy.DataCanonicalJSON[placed](),
		"stream sequence":        idstrategy.StreamSequence[placed](),
		"topic partition offset": idstrategy.TopicPartitionOffset[placed](),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			id, err := key(nil)
			wantErr(t, id, err, dedup.ErrNoKey, "idstrategy: "+name+": dedup: message has no id: the message is nil")

			id, err = key(&dedup.Message[placed]{})
			wantErr(t, id, err, dedup.ErrNoKey, "idstrategy: "+name+": dedup: message has no id: ")
		})
	}
}

// The strategies the Receiver calls on every delivery of a producer id stay
// free.
func TestMessageStrategiesDoNotAllocate(t *testing.T) {
	m := jetStreamMessage()
	for name, key := range map[string]dedup.KeyFunc[placedMsg]{
		"MessageID":     idstrategy.MessageID[placed](),
		"MessageHeader": idstrategy.MessageHeader[placed]("Idempotency-Key"),
		"BodyField":     idstrategy.BodyField("OrderID", placedOrderID),
	} {
		require.Zero(t, testing.AllocsPerRun(100, func() { _, _ = key(m) }), name)
	}
}

// FuzzMessageStrategies fills the envelope with anything: no panic, and
// either a valid id or an error matching exactly one sentinel.
func FuzzMessageStrategies(f *testing.F) {
	f.Add("msg-7", "idem-7", "ORDERS", 0, int64(42), "jetstream", []byte(placedData))
	f.Add("", "", "", 0, int64(0), "nats", []byte(nil))
	f.Add("\xff", "x", "orders", 3, int64(1042), "kafka", []byte(`{"a":1,"a":2}`))
	f.Add("m", "\xff", "a:b", -1, int64(-1), "", []byte("\xff"))
	f.Fuzz(func(t *testing.T, id, header, stream string, partition int, offset int64, broker string, data []byte) {
		m := &dedup.Message[placed]{
			Body:   placed{OrderID: id},
			Data:   data,
			Header: kafkaHeaders{{Key: "Idempotency-Key", Value: []byte(header)}},
			ID:     id, Stream: stream, Partition: partition, Offset: offset, Broker: broker,
		}
		for i, key := range []dedup.KeyFunc[placedMsg]{
			idstrategy.MessageID[placed](),
			idstrategy.MessageHeader[placed]("Idempotency-Key"),
			idstrategy.BodyField("OrderID", placedOrderID),
			idstrategy.DataHash[placed](),
			idstrategy.DataCanonicalJSON[placed](),
			idstrategy.StreamSequence[placed](),
			idstrategy.TopicPartitionOffset[placed](),
		} {
			got, err := key(m)
			if err == nil {
				if err := adapter.ValidateID(got, 0); err != nil {
					t.Fatalf("strategy %d returned %q: %v", i, short(got), err)
				}
				continue
			}
			if got != "" || errors.Is(err, dedup.ErrNoKey) == errors.Is(err, dedup.ErrInvalidKey) {
				t.Fatalf("strategy %d: %q, %v", i, short(got), err)
			}
		}
	})
}
