package redrive_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/dedup-go/dedup"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/internal/testenv"
)

// The tool's default group, whose offsets say which letters are done.
const toolGroup = "dedupctl-redrive"

// kafkaEnv is one test's Kafka: an in-process cluster (kfake, which speaks
// the real protocol) with a topic of orders (3 partitions) and a
// dead-letter topic (of dlqParts), a group of workers, and a store.
type kafkaEnv struct {
	brokers    []string
	client     *kafka.Client
	writer     *kafka.Writer
	topic, dlq string
	dlqParts   int
	group      string
	st         testStore
	ns         string
}

func newKafkaEnv(t testing.TB, dlqParts int) *kafkaEnv {
	t.Helper()
	e := &kafkaEnv{topic: "orders", dlq: "orders.dlq", dlqParts: dlqParts, group: "workers", st: newStore(t), ns: "orders"}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(500*time.Millisecond),
		kfake.SeedTopics(3, e.topic), kfake.SeedTopics(int32(dlqParts), e.dlq))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	e.brokers = c.ListenAddrs()
	tr := &kafka.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	e.client = &kafka.Client{Addr: kafka.TCP(e.brokers...), Transport: tr}
	e.writer = &kafka.Writer{Addr: kafka.TCP(e.brokers...), Transport: tr, Balancer: &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond, BatchSize: 1000}
	t.Cleanup(func() { _ = e.writer.Close() })
	return e
}

// args are the tool's arguments to redrive the test's dead letters.
func (e *kafkaEnv) args(extra ...string) []string {
	args := append([]string{"redrive", "kafka", "--brokers", e.brokers[0], "--topic", e.dlq}, e.st.flags...)
	return append(args, extra...)
}

// produce writes the orders keyed by id, each with a Message-Id header.
func (e *kafkaEnv) produce(t testing.TB, os []Order) {
	t.Helper()
	msgs := make([]kafka.Message, len(os))
	for i, o := range os {
		msgs[i] = kafka.Message{Topic: e.topic, Key: []byte(o.ID), Value: orderJSON(t, o), Headers: []kafka.Header{
			{Key: dedupkafka.HeaderMessageID, Value: []byte("m-" + o.ID)}, {Key: "Tenant", Value: []byte("acme")},
		}}
	}
	e.produceMessages(t, msgs)
}

func (e *kafkaEnv) produceMessages(t testing.TB, msgs []kafka.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	require.NoError(t, e.writer.WriteMessages(ctx, msgs...))
}

// consume runs rcv over the orders topic in the workers' group until the
// returned stop is called (or the test ends).
func (e *kafkaEnv) consume(t testing.TB, rcv *dedup.Receiver[*dedup.Message[Order], string], fingerprint bool) (stop func()) {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: e.brokers, GroupID: e.group, Topic: e.topic,
		MaxWait: 50 * time.Millisecond, SessionTimeout: time.Second, HeartbeatInterval: 100 * time.Millisecond,
		RebalanceTimeout: 2 * time.Second, JoinGroupBackoff: 100 * time.Millisecond,
		ReadBackoffMin: 10 * time.Millisecond, ReadBackoffMax: 100 * time.Millisecond, StartOffset: kafka.FirstOffset,
	})
	c, err := dedupkafka.NewConsumer(r, rcv, &dedupkafka.Options{
		DeadLetterTopic: e.dlq, Concurrency: 3, CommitInterval: dedupkafka.CommitEveryOutcome, Fingerprint: fingerprint,
	})
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
		defer cancel()
		require.NoError(t, c.Stop(ctx))
		testenv.Recv(t, c.Stopped(), "the consumer to stop")
		_ = r.Close()
	}
	t.Cleanup(stop)
	return stop
}

// ends returns each partition's end offset of topic.
func (e *kafkaEnv) ends(t testing.TB, topic string, partitions int) map[int]int64 {
	t.Helper()
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for p := range partitions {
		req.Topics[topic] = append(req.Topics[topic], kafka.LastOffsetOf(p))
	}
	resp, err := e.client.ListOffsets(t.Context(), req)
	require.NoError(t, err)
	out := map[int]int64{}
	for _, p := range resp.Topics[topic] {
		require.NoError(t, p.Error)
		out[p.Partition] = p.LastOffset
	}
	return out
}

// lag is how many messages of topic group has not committed past.
func (e *kafkaEnv) lag(t testing.TB, group, topic string, partitions int) int64 {
	t.Helper()
	ends := e.ends(t, topic, partitions)
	ids := make([]int, partitions)
	for p := range ids {
		ids[p] = p
	}
	resp, err := e.client.OffsetFetch(t.Context(), &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: ids}})
	require.NoError(t, err)
	var lag int64
	committed := map[int]int64{}
	if !errors.Is(resp.Error, kafka.GroupIdNotFound) { // kfake's answer for a group that never committed
		require.NoError(t, resp.Error)
		for _, p := range resp.Topics[topic] {
			require.NoError(t, p.Error)
			committed[p.Partition] = max(p.CommittedOffset, 0)
		}
	}
	for p, end := range ends {
		lag += end - committed[p]
	}
	return lag
}

// letters is how many dead letters the tool's group has not passed.
func (e *kafkaEnv) letters(t testing.TB) int64 { return e.lag(t, toolGroup, e.dlq, e.dlqParts) }

// written is how many messages a topic holds (its ends summed).
func (e *kafkaEnv) written(t testing.TB, topic string, partitions int) int64 {
	t.Helper()
	var n int64
	for _, end := range e.ends(t, topic, partitions) {
		n += end
	}
	return n
}

// waitDLQ waits until the dead-letter topic holds n letters.
func (e *kafkaEnv) waitDLQ(t testing.TB, n int64) {
	t.Helper()
	eventually(t, testenv.WaitTimeout, "the dead letters", func() bool { return e.written(t, e.dlq, e.dlqParts) >= n })
	require.Equal(t, n, e.written(t, e.dlq, e.dlqParts))
}

// drained waits until the workers' group committed past every order, then
// stops the consumer.
func (e *kafkaEnv) drained(t testing.TB, stop func()) {
	t.Helper()
	eventually(t, testenv.WaitTimeout, "the workers to commit every order", func() bool { return e.lag(t, e.group, e.topic, 3) == 0 })
	stop()
}

// deadLetter produces the orders and has a broken handler fail each one,
// so that the adapter dead-letters them all (attempts-exhausted, with a
// failed record each).
func (e *kafkaEnv) deadLetter(t testing.TB, os []Order) {
	t.Helper()
	before := e.written(t, e.dlq, e.dlqParts)
	e.produce(t, os)
	stop := e.consume(t, brokenReceiver(t, e.st, e.ns), false)
	e.waitDLQ(t, before+int64(len(os)))
	e.drained(t, stop)
}

// readAll reads every message of topic's partitions from the start.
func (e *kafkaEnv) readAll(t testing.TB, topic string, partitions int) []kafka.Message {
	t.Helper()
	var out []kafka.Message
	for p, end := range e.ends(t, topic, partitions) {
		if end == 0 {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.brokers, Topic: topic, Partition: p, MaxWait: 50 * time.Millisecond})
		ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
		for {
			m, err := r.FetchMessage(ctx)
			require.NoError(t, err)
			out = append(out, m)
			if m.Offset == end-1 {
				break
			}
		}
		cancel()
		require.NoError(t, r.Close())
	}
	return out
}
