package dedupkafka_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

// TestEnvelope: the adapter fills the envelope from the record: topic,
// partition, offset, headers in order (repeated names included), time,
// broker, and the kafka.Message behind it; Kafka counts no deliveries and
// has no message id.
func TestEnvelope(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	brokers := startKafka(t, 2, topic)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	produce(t, newWriter(t, brokers), topic, []kafka.Message{{
		Partition: 1, Key: []byte("k-1"), Value: []byte("raw body"), Time: at,
		Headers: []kafka.Header{{Key: "Trace", Value: []byte("a")}, {Key: "trace", Value: []byte("b")}, {Key: "Trace", Value: []byte("c")}},
	}})
	got := make(chan *dedup.Message[[]byte], 1)
	s, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(s, dedupkafka.MessageKey[[]byte](),
		func(_ context.Context, m *dedup.Message[[]byte]) (struct{}, error) {
			got <- m
			return struct{}{}, nil
		}, fastConfig("billing"))
	require.NoError(t, err)
	c, err := dedupkafka.NewConsumer(newReader(t, brokers, "g", topic), rcv, &dedupkafka.Options{DropPoison: true, Decoder: dedup.RawDecoder{}})
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)

	var m *dedup.Message[[]byte]
	select {
	case m = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("no message")
	}
	require.Equal(t, "raw body", string(m.Body))
	require.Equal(t, "raw body", string(m.Data))
	require.Equal(t, topic, m.Source)
	require.Equal(t, topic, m.Stream)
	require.Equal(t, 1, m.Partition)
	require.EqualValues(t, 0, m.Offset)
	require.True(t, at.Equal(m.Timestamp), "timestamp %v", m.Timestamp)
	require.Equal(t, dedupkafka.BrokerKafka, m.Broker)
	require.Empty(t, m.ID)
	require.Zero(t, m.DeliveryCount)
	require.False(t, m.Redelivered)
	v, ok := m.HeaderValue("Trace")
	require.True(t, ok)
	require.Equal(t, "a", v, "the first of a repeated header")
	_, ok = m.HeaderValue("TRACE")
	require.False(t, ok, "names match exactly")
	var all []string
	for k, v := range m.Header.All() {
		all = append(all, k+"="+v)
	}
	require.Equal(t, []string{"Trace=a", "trace=b", "Trace=c"}, all)
	km, ok := dedupkafka.Native(m)
	require.True(t, ok)
	require.Equal(t, "k-1", string(km.Key))
	id, err := dedupkafka.MessageKey[[]byte]()(m)
	require.NoError(t, err)
	require.Equal(t, "k-1", id)
	tpo, err := idstrategy.TopicPartitionOffset[[]byte]()(m)
	require.NoError(t, err)
	require.Equal(t, "orders:1:0", tpo)
}

func TestMessageKey(t *testing.T) {
	t.Parallel()
	key := dedupkafka.MessageKey[string]()
	for name, tc := range map[string]struct {
		m    *dedup.Message[string]
		want error
	}{
		"nil message":       {nil, dedup.ErrNoKey},
		"not from Kafka":    {&dedup.Message[string]{Native: "x"}, dedup.ErrNoKey},
		"no key":            {&dedup.Message[string]{Native: kafka.Message{}}, dedup.ErrNoKey},
		"binary key":        {&dedup.Message[string]{Native: kafka.Message{Key: []byte{0xff, 0xfe}}}, dedup.ErrInvalidKey},
		"over-long key":     {&dedup.Message[string]{Native: kafka.Message{Key: make([]byte, adapter.DefaultMaxIDLength+1)}}, dedup.ErrInvalidKey},
		"key of its own id": {&dedup.Message[string]{Native: kafka.Message{Key: []byte("order-7")}}, nil},
	} {
		id, err := key(tc.m)
		if tc.want != nil {
			require.ErrorIs(t, err, tc.want, name)
			continue
		}
		require.NoError(t, err, name)
		require.Equal(t, "order-7", id)
	}
	_, ok := dedupkafka.Native[string](nil)
	require.False(t, ok)
}

// TestWriterStampsIDs: the Writer stamps a Message-Id on each message that
// has none, and keeps it when the same messages are written again (a
// producer retry): keyed on the header, the receiver runs the handler once
// per message and answers the copies as duplicates. With Fingerprint, a
// message reusing an id with another value is dead-lettered as key-reused.
func TestWriterStampsIDs(t *testing.T) {
	t.Parallel()
	const topic, dlq = "orders", "orders.dlq"
	brokers := startKafka(t, 1, topic, dlq)
	w := &dedupkafka.Writer{W: newWriter(t, brokers)}
	msgs := []kafka.Message{
		{Topic: topic, Value: orderJSON(t, Order{ID: "a", Cents: 1})},
		{Topic: topic, Value: orderJSON(t, Order{ID: "b", Cents: 2})},
		{Topic: topic, Value: orderJSON(t, Order{ID: "c", Cents: 3}), Headers: []kafka.Header{{Key: dedupkafka.HeaderMessageID, Value: []byte("mine")}}},
	}
	require.NoError(t, w.WriteMessages(t.Context(), msgs...))
	require.NoError(t, w.WriteMessages(t.Context(), msgs...), "the retry")
	ids := map[string]bool{}
	for _, m := range msgs {
		n := 0
		for k := range dedupkafka.Header(m.Headers).All() {
			if k == dedupkafka.HeaderMessageID {
				n++
			}
		}
		require.Equal(t, 1, n, "one Message-Id per message, written twice")
		id, ok := dedupkafka.Header(m.Headers).Get(dedupkafka.HeaderMessageID)
		require.True(t, ok)
		ids[id] = true
	}
	require.Len(t, ids, 3)
	require.True(t, ids["mine"], "an id of the producer's own is kept")
	reused := kafka.Message{Topic: topic, Value: orderJSON(t, Order{ID: "a", Cents: 999}), Headers: msgs[0].Headers}
	require.NoError(t, w.WriteMessages(t.Context(), reused))

	var mu sync.Mutex
	var handled []string
	reasons := map[delivery.Reason]int{}
	s, err := memstore.New(nil)
	require.NoError(t, err)
	cfg := fastConfig("billing")
	cfg.Observer = onSettled(func(e delivery.Event) {
		mu.Lock()
		defer mu.Unlock()
		reasons[e.Decision.Reason]++
	})
	rcv, err := dedup.NewReceiver(s, idstrategy.MessageHeader[Order](dedupkafka.HeaderMessageID),
		func(_ context.Context, m *dedup.Message[Order]) (Receipt, error) {
			mu.Lock()
			defer mu.Unlock()
			handled = append(handled, m.Body.ID)
			return Receipt{OrderID: m.Body.ID}, nil
		}, cfg)
	require.NoError(t, err)
	c, err := dedupkafka.NewConsumer(newReader(t, brokers, "g", topic), rcv, &dedupkafka.Options{Fingerprint: true, DeadLetterTopic: dlq})
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)
	eventually(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return reasons[delivery.ReasonKeyReused] == 1
	}, "every message settled")
	mu.Lock()
	require.Equal(t, []string{"a", "b", "c"}, slices.Sorted(slices.Values(handled)))
	require.Equal(t, map[delivery.Reason]int{delivery.ReasonProcessed: 3, delivery.ReasonDuplicate: 3, delivery.ReasonKeyReused: 1}, reasons)
	mu.Unlock()
	letters := readAll(t, brokers, dlq, 1)
	orig, _ := dedupkafka.Header(letters[0].Headers).Get(delivery.HeaderOriginalMessageID)
	first, _ := dedupkafka.Header(msgs[0].Headers).Get(dedupkafka.HeaderMessageID)
	require.Equal(t, first, orig, "the dead letter keeps the original's id")
}
