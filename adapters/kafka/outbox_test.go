package dedupkafka_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedup-go/dedup"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/outbox/outboxtest"
	"github.com/dedup-go/dedup/store/memstore"
)

// TestOutboxPublisher runs the outbox publishers' suite on Kafka: a topic
// of three partitions of its own per test, a topic that does not exist
// as the destination refused, read back partition by partition.
func TestOutboxPublisher(t *testing.T) {
	t.Parallel()
	brokers := startKafka(t, 1)
	w := outboxWriter(t, brokers, nil)
	runOutboxSuite(t, brokers, w, newOutboxPublisher(t, w))
}

// runOutboxSuite runs the outbox publishers' suite on p, which writes
// with w to brokers.
func runOutboxSuite(t *testing.T, brokers []string, w *kafka.Writer, p outbox.Publisher) {
	n := 0
	outboxtest.Run(t, func(t *testing.T) outboxtest.Target {
		n++
		topic := fmt.Sprintf("outbox-%d", n)
		// Through the writer's transport, which serves metadata from its
		// cache (kafka.Transport.MetadataTTL): a topic created by
		// another client would be unknown to it until its next refresh.
		client := &kafka.Client{Addr: w.Addr, Transport: w.Transport}
		resp, err := client.CreateTopics(t.Context(), &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: 3, ReplicationFactor: 1}}})
		require.NoError(t, err)
		require.NoError(t, resp.Errors[topic])
		return outboxtest.Target{
			Publisher:   p,
			Destination: topic,
			Unroutable:  topic + "-missing",
			Invalid:     "not a topic",
			Read: func(ctx context.Context, want int) ([]outboxtest.Received, error) {
				ms, err := readTopic(ctx, brokers, topic, want)
				var out []outboxtest.Received
				for _, m := range ms {
					r := outboxtest.Received{Body: m.Value, Header: map[string]string{}}
					r.ID, _ = dedupkafka.Header(m.Headers).Get(dedupkafka.HeaderMessageID)
					for k, v := range dedupkafka.Header(m.Headers).All() {
						r.Header[k] = v
					}
					out = append(out, r)
				}
				return out, err
			},
		}
	})
}

// TestOutboxPublisherRecord: what a record carries (the ordering key as
// its key, the headers in the order of their names, the id last, a
// Message-Id of the message's own replaced), and the messages Kafka
// cannot take fail alone, before anything is written.
func TestOutboxPublisherRecord(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	brokers := startKafka(t, 1, topic)
	p := newOutboxPublisher(t, outboxWriter(t, brokers, nil))
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	keyed := outbox.Message{ID: outbox.MessageID("billing:o-1", "1"), Destination: topic, OrderingKey: "o-1",
		Body: []byte(`{"id":"o-1"}`), Header: map[string]string{"Trace": "t", "Event-Type": "payment.captured", dedupkafka.HeaderMessageID: "forged"}}
	keyless := outbox.Message{ID: outbox.MessageID("billing:o-1", "2"), Destination: topic, Body: []byte{}}
	msgs := []outbox.Message{
		keyed, keyless,
		{ID: "no-topic", Body: []byte("x")},
		{ID: "bad-topic", Destination: "orders/eu", Body: []byte("x")},
		{ID: "dots", Destination: "..", Body: []byte("x")},
		{ID: "", Destination: topic, Body: []byte("x")},
	}
	err := p.Publish(ctx, msgs)
	require.Equal(t, []bool{true, true, false, false, false, false}, outbox.Acknowledged(err, len(msgs)), "%v", err)
	require.ErrorIs(t, err, dedupkafka.ErrInvalidMessage)
	var be *outbox.BatchError
	require.ErrorAs(t, err, &be)
	for _, e := range be.Errs[2:] {
		require.ErrorIs(t, e, outbox.ErrPermanent)
	}

	got, err := readTopic(ctx, brokers, topic, 2)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, []byte("o-1"), got[0].Key)
	require.Equal(t, keyed.Body, got[0].Value)
	require.Equal(t, []kafka.Header{
		{Key: "Event-Type", Value: []byte("payment.captured")},
		{Key: "Trace", Value: []byte("t")},
		{Key: dedupkafka.HeaderMessageID, Value: []byte(keyed.ID)},
	}, got[0].Headers)
	require.Nil(t, got[1].Key, "no ordering key, no record key")
	require.Equal(t, []kafka.Header{{Key: dedupkafka.HeaderMessageID, Value: []byte(keyless.ID)}}, got[1].Headers)
}

// TestOutboxPublisherOrderPerKey: the messages of one ordering key, one
// per call as the relay sends them, all land in one partition, in order;
// the keys spread over the partitions.
func TestOutboxPublisherOrderPerKey(t *testing.T) {
	t.Parallel()
	const topic, keys, rounds = "events", 12, 6
	brokers := startKafka(t, 3, topic)
	p := newOutboxPublisher(t, outboxWriter(t, brokers, nil))
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	for r := range rounds {
		var msgs []outbox.Message
		for k := range keys {
			msgs = append(msgs, outbox.Message{ID: fmt.Sprintf("k%d-%d", k, r), Destination: topic,
				OrderingKey: fmt.Sprintf("key-%d", k), Body: []byte(strconv.Itoa(r))})
		}
		require.NoError(t, p.Publish(ctx, msgs))
	}
	got, err := readTopic(ctx, brokers, topic, keys*rounds)
	require.NoError(t, err)
	partition := map[string]int{}
	order := map[string][]string{}
	for _, m := range got {
		k := string(m.Key)
		if p, ok := partition[k]; ok {
			require.Equal(t, p, m.Partition, "key %s in two partitions", k)
		}
		partition[k] = m.Partition
		order[k] = append(order[k], string(m.Value))
	}
	used := map[int]bool{}
	for k := range keys {
		key := fmt.Sprintf("key-%d", k)
		require.Equal(t, []string{"0", "1", "2", "3", "4", "5"}, order[key], "key %s", key)
		used[partition[key]] = true
	}
	require.Len(t, used, 3, "the keys spread over the partitions")
}

// TestOutboxPublisherWriter: the writers refused, and the acknowledgement
// asked of the broker on the wire: all in-sync replicas (acks -1).
func TestOutboxPublisherWriter(t *testing.T) {
	t.Parallel()
	for name, w := range map[string]*kafka.Writer{
		"nil":         nil,
		"topic":       {Topic: "t", RequiredAcks: kafka.RequireAll, Balancer: &kafka.Hash{}},
		"acks one":    {RequiredAcks: kafka.RequireOne, Balancer: &kafka.Hash{}},
		"acks none":   {RequiredAcks: kafka.RequireNone, Balancer: &kafka.Hash{}},
		"async":       {RequiredAcks: kafka.RequireAll, Async: true, Balancer: &kafka.Hash{}},
		"no balancer": {RequiredAcks: kafka.RequireAll},
		"round robin": {RequiredAcks: kafka.RequireAll, Balancer: &kafka.RoundRobin{}},
		"least bytes": {RequiredAcks: kafka.RequireAll, Balancer: &kafka.LeastBytes{}},
	} {
		_, err := dedupkafka.NewOutboxPublisher(w)
		require.ErrorIs(t, err, dedup.ErrInvalidConfig, name)
	}

	const topic = "orders"
	cluster := startCluster(t, 2, topic)
	var mu sync.Mutex
	acks := map[int16]int{}
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		mu.Lock()
		acks[req.(*kmsg.ProduceRequest).Acks]++
		mu.Unlock()
		return nil, nil, false
	})
	p := newOutboxPublisher(t, outboxWriter(t, cluster.ListenAddrs(), nil))
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	var msgs []outbox.Message
	for i := range 10 {
		msgs = append(msgs, outbox.Message{ID: strconv.Itoa(i), Destination: topic, OrderingKey: strconv.Itoa(i), Body: []byte("x")})
	}
	require.NoError(t, p.Publish(ctx, msgs))
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, acks)
	require.Equal(t, []int16{-1}, keysOf(acks), "every produce request asks for all in-sync replicas")
}

// TestOutboxPublisherPartitionRefused: the broker refuses the produce of
// one partition: its messages fail, those of the other partition (and of
// another topic) are acknowledged.
func TestOutboxPublisherPartitionRefused(t *testing.T) {
	t.Parallel()
	cluster := refusingPartition(t)
	p := newOutboxPublisher(t, outboxWriter(t, cluster.ListenAddrs(), keyPartition{}))
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	msgs := partitionRefusedMessages()
	err := p.Publish(ctx, msgs)
	require.Equal(t, []bool{true, false, true, false, true}, outbox.Acknowledged(err, len(msgs)), "%v", err)
	require.ErrorIs(t, err, kafka.InvalidRecord)
	require.NotErrorIs(t, err, outbox.ErrPermanent, "the broker's refusal of a batch does not say which message")
}

// TestOutboxPublisherTooLarge: a message over the writer's BatchBytes
// fails alone (kafka-go refuses the whole call for it); the others of its
// topic are written.
func TestOutboxPublisherTooLarge(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	brokers := startKafka(t, 1, topic)
	w := outboxWriter(t, brokers, nil)
	w.BatchBytes = 1 << 10
	p := newOutboxPublisher(t, w)
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	msgs := []outbox.Message{
		{ID: "1", Destination: topic, Body: []byte("small")},
		{ID: "2", Destination: topic, Body: bytes.Repeat([]byte("x"), 2<<10)},
		{ID: "3", Destination: topic, Body: []byte("small")},
	}
	err := p.Publish(ctx, msgs)
	require.Equal(t, []bool{true, false, true}, outbox.Acknowledged(err, len(msgs)), "%v", err)
	require.ErrorIs(t, err, kafka.MessageSizeTooLarge)
	require.ErrorIs(t, err, outbox.ErrPermanent, "a message over the limit is refused for good")
	got, err := readTopic(ctx, brokers, topic, 2)
	require.NoError(t, err)
	require.Len(t, got, 2)
}

// TestOutboxPublisherBrokerDown: with the cluster gone, a Publish returns
// by its context's end (kafka-go goes on retrying longer), none
// acknowledged; once a cluster is back at the address, the same
// publisher writes again, and kafka-go's retries write the first call's
// messages as they were (the publisher copied their bodies).
func TestOutboxPublisherBrokerDown(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	port := testenv.FreePort(t)
	start := func() *kfake.Cluster {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(1, topic))
		require.NoError(t, err)
		return c
	}
	cluster := start()
	brokers := cluster.ListenAddrs()
	w := outboxWriter(t, brokers, nil)
	w.MaxAttempts, w.WriteBackoffMin, w.WriteBackoffMax = 30, 100*time.Millisecond, 100*time.Millisecond
	p := newOutboxPublisher(t, w)
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	msgs := []outbox.Message{
		{ID: "1", Destination: topic, OrderingKey: "a", Body: []byte("x")},
		{ID: "2", Destination: topic, OrderingKey: "b", Body: []byte("x")},
	}
	require.NoError(t, p.Publish(ctx, msgs))
	cluster.Close()

	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelShort()
	done := make(chan error, 1)
	go func() { done <- p.Publish(short, msgs) }()
	err := testenv.Recv(t, done, "Publish to return with the broker down")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, []bool{false, false}, outbox.Acknowledged(err, len(msgs)))

	// The relay may reuse its buffers once Publish returned; kafka-go
	// still holds the batch it retries.
	for _, m := range msgs {
		copy(m.Body, "!")
	}

	cluster = start()
	t.Cleanup(cluster.Close)
	again := []outbox.Message{
		{ID: "1", Destination: topic, OrderingKey: "a", Body: []byte("x")},
		{ID: "2", Destination: topic, OrderingKey: "b", Body: []byte("x")},
	}
	require.NoError(t, p.Publish(ctx, again), "the cluster is back")
	// kafka-go's retries of the first call land too: four records.
	got, err := readTopic(ctx, brokers, topic, 4)
	require.NoError(t, err)
	require.Len(t, got, 4)
	ids := map[string]int{}
	for _, m := range got {
		id, _ := dedupkafka.Header(m.Headers).Get(dedupkafka.HeaderMessageID)
		ids[id]++
		require.Equal(t, "x", string(m.Value), "the body as it was published")
	}
	require.Equal(t, map[string]int{"1": 2, "2": 2}, ids, "every copy with its id")
}

// TestOutboxPublisherDedupedDownstream: the same outbox message written
// twice (a relay that publishes it again after a crash) reaches the next
// Consumer twice, keyed on its Message-Id header: the handler runs once.
func TestOutboxPublisherDedupedDownstream(t *testing.T) {
	t.Parallel()
	const topic = "payments"
	brokers := startKafka(t, 1, topic)
	p := newOutboxPublisher(t, outboxWriter(t, brokers, nil))
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	captured := outbox.Message{ID: outbox.MessageID("billing:o-1", "payment-captured"), Destination: topic,
		OrderingKey: "o-1", Body: []byte(`{"id":"o-1","cents":100}`)}
	other := outbox.Message{ID: outbox.MessageID("billing:o-2", "payment-captured"), Destination: topic,
		OrderingKey: "o-2", Body: []byte(`{"id":"o-2","cents":200}`)}
	require.NoError(t, p.Publish(ctx, []outbox.Message{captured, other}))
	require.NoError(t, p.Publish(ctx, []outbox.Message{captured}))

	var handled deduptest.Effects
	var mu sync.Mutex
	reasons := map[delivery.Reason]int{}
	st, err := memstore.New(nil)
	require.NoError(t, err)
	cfg := fastConfig("shipping")
	cfg.Observer = onSettled(func(e delivery.Event) {
		mu.Lock()
		defer mu.Unlock()
		reasons[e.Decision.Reason]++
	})
	rcv, err := dedup.NewReceiver(st, idstrategy.MessageHeader[Order](dedupkafka.HeaderMessageID),
		func(_ context.Context, m *dedup.Message[Order]) (Receipt, error) {
			id, _ := m.HeaderValue(dedupkafka.HeaderMessageID)
			handled.Record(id)
			return Receipt{OrderID: m.Body.ID}, nil
		}, cfg)
	require.NoError(t, err)
	c, err := dedupkafka.NewConsumer(newReader(t, brokers, "shipping", topic), rcv, &dedupkafka.Options{DropPoison: true})
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)
	eventually(t, testenv.WaitTimeout, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return reasons["processed"]+reasons["duplicate"] == 3
	}, "three deliveries settled")
	handled.ExactlyOnce(captured.ID, other.ID).Check(t)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[delivery.Reason]int{"processed": 2, "duplicate": 1}, reasons)
}

// outboxWriter returns a writer for an outbox publisher: acknowledged by
// all in-sync replicas, keys hashed (or balanced by b), no lingering;
// closed at the end of the test.
func outboxWriter(t *testing.T, brokers []string, b kafka.Balancer) *kafka.Writer {
	t.Helper()
	tr := &kafka.Transport{}
	w := &kafka.Writer{
		Addr: kafka.TCP(brokers...), Balancer: cmpOr(b, kafka.Balancer(kafka.Murmur2Balancer{})),
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond, BatchSize: 1000,
		MaxAttempts: 3, WriteBackoffMin: 10 * time.Millisecond, WriteBackoffMax: 50 * time.Millisecond,
		Transport: tr,
	}
	t.Cleanup(func() {
		_ = w.Close()
		tr.CloseIdleConnections()
	})
	return w
}

func cmpOr(b, def kafka.Balancer) kafka.Balancer {
	if b != nil {
		return b
	}
	return def
}

func newOutboxPublisher(t *testing.T, w *kafka.Writer) *dedupkafka.OutboxPublisher {
	t.Helper()
	p, err := dedupkafka.NewOutboxPublisher(w)
	require.NoError(t, err)
	return p
}

// keyPartition puts a message in the partition its key's first digit
// names (0 without a key).
type keyPartition struct{}

func (keyPartition) Balance(m kafka.Message, _ ...int) int {
	if len(m.Key) == 0 {
		return 0
	}
	return int(m.Key[0] - '0')
}

func keysOf(m map[int16]int) []int16 {
	var out []int16
	for k := range m {
		out = append(out, k)
	}
	return out
}

// readTopic waits for topic to hold at least n messages, then reads all it
// holds, partition after partition, each in offset order.
func readTopic(ctx context.Context, brokers []string, topic string, n int) ([]kafka.Message, error) {
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr}
	var ends map[int]int64
	for {
		meta, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
		if err != nil {
			return nil, err
		}
		if len(meta.Topics) != 1 || meta.Topics[0].Error != nil {
			return nil, fmt.Errorf("topic %s: %v", topic, meta.Topics)
		}
		req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
		for _, p := range meta.Topics[0].Partitions {
			req.Topics[topic] = append(req.Topics[topic], kafka.LastOffsetOf(p.ID))
		}
		resp, err := client.ListOffsets(ctx, req)
		if err != nil {
			return nil, err
		}
		ends = map[int]int64{}
		total := int64(0)
		for _, p := range resp.Topics[topic] {
			if p.Error != nil {
				return nil, p.Error
			}
			ends[p.Partition] = p.LastOffset
			total += p.LastOffset
		}
		if total >= int64(n) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s holds %d of %d messages: %w", topic, total, n, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	var out []kafka.Message
	for p := range len(ends) {
		if ends[p] == 0 {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: p, MaxWait: 50 * time.Millisecond})
		for range ends[p] {
			m, err := r.FetchMessage(ctx)
			if err != nil {
				_ = r.Close()
				return nil, err
			}
			out = append(out, m)
		}
		_ = r.Close()
	}
	return out, nil
}

// BenchmarkOutboxPublish writes batches of 256 keyed messages of 256
// bytes to a topic of 3 partitions (kfake, in process), acknowledged by
// all in-sync replicas: with the writer's WriteMessages and with the
// OutboxPublisher on the same writer, alternating, in the same run. An op
// is one batch of each.
//
//	go test -run '^$' -bench BenchmarkOutboxPublish -benchtime 200x .
func BenchmarkOutboxPublish(b *testing.B) {
	const topic, size = "bench", 256
	brokers := startKafka(b, 3, topic)
	tr := &kafka.Transport{}
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Balancer: kafka.Murmur2Balancer{}, RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, BatchSize: 1000, Transport: tr}
	b.Cleanup(func() {
		_ = w.Close()
		tr.CloseIdleConnections()
	})
	p, err := dedupkafka.NewOutboxPublisher(w)
	require.NoError(b, err)
	ctx := context.Background()
	body := bytes.Repeat([]byte("b"), 256)
	var bareTime, outboxTime time.Duration
	b.ResetTimer()
	for i := range b.N {
		msgs := make([]outbox.Message, size)
		records := make([]kafka.Message, size)
		for j := range msgs {
			id := outbox.MessageID("bench", fmt.Sprint(i, "-", j))
			key := fmt.Sprint("key-", j)
			msgs[j] = outbox.Message{ID: id, Destination: topic, OrderingKey: key, Body: body}
			records[j] = kafka.Message{Topic: topic, Key: []byte(key), Value: body,
				Headers: []kafka.Header{{Key: dedupkafka.HeaderMessageID, Value: []byte(id)}}}
		}
		start := time.Now()
		require.NoError(b, w.WriteMessages(ctx, records...))
		bareTime += time.Since(start)
		start = time.Now()
		require.NoError(b, p.Publish(ctx, msgs))
		outboxTime += time.Since(start)
	}
	total := float64(b.N * size)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(total/bareTime.Seconds(), "bare-msgs/s")
	b.ReportMetric(total/outboxTime.Seconds(), "outbox-msgs/s")
	b.ReportMetric(bareTime.Seconds()/outboxTime.Seconds(), "ratio")
}

// refusingPartition starts a cluster of two topics, "a" and "b", of two
// partitions each, whose broker refuses every produce request for
// partition 1 of "a" alone with InvalidRecord.
func refusingPartition(t *testing.T) *kfake.Cluster {
	t.Helper()
	cluster := startCluster(t, 2, "a", "b")
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		if len(pr.Topics) != 1 || pr.Topics[0].Topic != "a" || len(pr.Topics[0].Partitions) != 1 || pr.Topics[0].Partitions[0].Partition != 1 {
			return nil, nil, false
		}
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = "a"
		rp := kmsg.NewProduceResponseTopicPartition()
		rp.Partition = 1
		rp.ErrorCode = kerr.InvalidRecord.Code
		rt.Partitions = append(rt.Partitions, rp)
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})
	return cluster
}

// partitionRefusedMessages are the messages of the partition-refused
// tests: with keyPartition, messages 1 and 3 (by index) go to partition 1
// of "a", which refusingPartition refuses; the others to partition 0 of
// "a" or to "b".
func partitionRefusedMessages() []outbox.Message {
	return []outbox.Message{
		{ID: "1", Destination: "a", OrderingKey: "0-x", Body: []byte("x")},
		{ID: "2", Destination: "a", OrderingKey: "1-x", Body: []byte("x")},
		{ID: "3", Destination: "b", OrderingKey: "1-x", Body: []byte("x")},
		{ID: "4", Destination: "a", OrderingKey: "1-y", Body: []byte("x")},
		{ID: "5", Destination: "a", OrderingKey: "0-y", Body: []byte("x")},
	}
}
