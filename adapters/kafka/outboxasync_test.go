package dedupkafka_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedup-go/dedup"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
)

// TestAsyncOutboxPublisher runs the outbox publishers' suite (PublishEach
// included) on the asynchronous writer.
func TestAsyncOutboxPublisher(t *testing.T) {
	t.Parallel()
	brokers := startKafka(t, 1)
	w := asyncOutboxWriter(t, brokers, nil)
	runOutboxSuite(t, brokers, w, newAsyncOutboxPublisher(t, w))
}

// TestAsyncOutboxPublisherWriter: the writers NewAsyncOutboxPublisher
// refuses, left untouched; the one it takes gets its Completion.
func TestAsyncOutboxPublisherWriter(t *testing.T) {
	t.Parallel()
	completion := func([]kafka.Message, error) {}
	for name, w := range map[string]*kafka.Writer{
		"nil":         nil,
		"sync":        {RequiredAcks: kafka.RequireAll, Balancer: &kafka.Hash{}},
		"completion":  {RequiredAcks: kafka.RequireAll, Async: true, Balancer: &kafka.Hash{}, Completion: completion},
		"topic":       {Topic: "t", RequiredAcks: kafka.RequireAll, Async: true, Balancer: &kafka.Hash{}},
		"acks one":    {RequiredAcks: kafka.RequireOne, Async: true, Balancer: &kafka.Hash{}},
		"no balancer": {RequiredAcks: kafka.RequireAll, Async: true},
		"round robin": {RequiredAcks: kafka.RequireAll, Async: true, Balancer: &kafka.RoundRobin{}},
	} {
		_, err := dedupkafka.NewAsyncOutboxPublisher(w)
		require.ErrorIs(t, err, dedup.ErrInvalidConfig, name)
		if w != nil && name != "completion" {
			require.Nil(t, w.Completion, "%s: a refused writer is left as it was", name)
		}
	}
	w := &kafka.Writer{RequiredAcks: kafka.RequireAll, Async: true, Balancer: kafka.Murmur2Balancer{}}
	_, err := dedupkafka.NewAsyncOutboxPublisher(w)
	require.NoError(t, err)
	require.NotNil(t, w.Completion)
	_, err = dedupkafka.NewAsyncOutboxPublisher(w)
	require.ErrorIs(t, err, dedup.ErrInvalidConfig, "a writer already taken by a publisher")
}

// TestAsyncOutboxPublisherReportsEach: the produce of one partition fails
// (a retriable error) until the test lets it through: the messages of the
// other partitions are reported acknowledged while PublishEach still
// waits for it, and it is reported once written; its key's order holds
// (kafka-go writes a partition's batches one after the other).
func TestAsyncOutboxPublisherReportsEach(t *testing.T) {
	t.Parallel()
	cluster := startCluster(t, 2, "a")
	var held atomic.Bool
	held.Store(true)
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		if !held.Load() || len(pr.Topics) != 1 || len(pr.Topics[0].Partitions) != 1 || pr.Topics[0].Partitions[0].Partition != 1 {
			return nil, nil, false
		}
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = pr.Topics[0].Topic
		rp := kmsg.NewProduceResponseTopicPartition()
		rp.Partition = 1
		rp.ErrorCode = kerr.NotLeaderForPartition.Code
		rt.Partitions = append(rt.Partitions, rp)
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})
	w := asyncOutboxWriter(t, cluster.ListenAddrs(), keyPartition{})
	w.MaxAttempts, w.WriteBackoffMin, w.WriteBackoffMax = 1000, 5*time.Millisecond, 5*time.Millisecond
	p := newAsyncOutboxPublisher(t, w)
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	msgs := []outbox.Message{
		{ID: "1", Destination: "a", OrderingKey: "0-x", Body: []byte("x")},
		{ID: "2", Destination: "a", OrderingKey: "1-x", Body: []byte("x")},
		{ID: "3", Destination: "a", OrderingKey: "0-y", Body: []byte("x")},
	}
	reports := make(chan int, len(msgs))
	var errs [3]error
	done := make(chan error, 1)
	go func() {
		done <- p.PublishEach(ctx, msgs, func(i int, err error) {
			errs[i] = err
			reports <- i
		})
	}()
	first := []int{testenv.Recv(t, reports, "a report"), testenv.Recv(t, reports, "a second report")}
	require.ElementsMatch(t, []int{0, 2}, first, "the messages of partition 0, while partition 1 is refused")
	select {
	case err := <-done:
		t.Fatalf("PublishEach returned (%v) before partition 1's message was written", err)
	default:
	}
	held.Store(false)
	require.NoError(t, testenv.Recv(t, done, "PublishEach to return"))
	require.Equal(t, 1, testenv.Recv(t, reports, "the third report"))
	require.Equal(t, [3]error{}, errs, "each acknowledged")
	got, err := readTopic(ctx, cluster.ListenAddrs(), "a", 3)
	require.NoError(t, err)
	require.Len(t, got, 3)
}

// TestAsyncOutboxPublisherPartitionRefused: the broker refuses the
// produce of one partition: its messages are reported failed, not for
// good (the refusal of a batch does not say which message), the others
// acknowledged.
func TestAsyncOutboxPublisherPartitionRefused(t *testing.T) {
	t.Parallel()
	cluster := refusingPartition(t)
	p := newAsyncOutboxPublisher(t, asyncOutboxWriter(t, cluster.ListenAddrs(), keyPartition{}))
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	msgs := partitionRefusedMessages()
	var mu sync.Mutex
	errs := map[int]error{}
	require.NoError(t, p.PublishEach(ctx, msgs, func(i int, err error) {
		mu.Lock()
		defer mu.Unlock()
		errs[i] = err
	}))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, errs, len(msgs))
	for i, failed := range []bool{false, true, false, true, false} {
		if !failed {
			require.NoError(t, errs[i], "message %d", i)
			continue
		}
		require.ErrorIs(t, errs[i], kafka.InvalidRecord, "message %d", i)
		require.NotErrorIs(t, errs[i], outbox.ErrPermanent, "message %d", i)
	}
}

// TestAsyncOutboxPublisherOrderPerKey: keys published as a relay does (a
// key's next message once its predecessor was reported), concurrently:
// each partition holds every key's messages in order.
func TestAsyncOutboxPublisherOrderPerKey(t *testing.T) {
	t.Parallel()
	const topic, keys, perKey = "events", 12, 20
	brokers := startKafka(t, 3, topic)
	p := newAsyncOutboxPublisher(t, asyncOutboxWriter(t, brokers, nil))
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for k := range keys {
		wg.Go(func() {
			for n := range perKey {
				m := outbox.Message{ID: fmt.Sprintf("k%d-%d", k, n), Destination: topic, OrderingKey: fmt.Sprintf("key-%d", k), Body: []byte(strconv.Itoa(n))}
				acked := false
				if err := p.PublishEach(ctx, []outbox.Message{m}, func(_ int, err error) { acked = err == nil }); err != nil || !acked {
					t.Errorf("message %s: %v", m.ID, err)
					return
				}
			}
		})
	}
	wg.Wait()
	got, err := readTopic(ctx, brokers, topic, keys*perKey)
	require.NoError(t, err)
	require.Len(t, got, keys*perKey)
	next := map[string]int{}
	for _, m := range got {
		require.Equal(t, strconv.Itoa(next[string(m.Key)]), string(m.Value), "key %s", m.Key)
		next[string(m.Key)]++
	}
}

// TestAsyncOutboxPublisherBrokerDown: with the cluster gone, PublishEach
// returns by its context's end, nothing reported, and nothing reported
// after it returned, although kafka-go's retries later write its messages
// to the cluster back at the address; the publisher then works again.
func TestAsyncOutboxPublisherBrokerDown(t *testing.T) {
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
	w := asyncOutboxWriter(t, brokers, nil)
	w.MaxAttempts, w.WriteBackoffMin, w.WriteBackoffMax = 30, 100*time.Millisecond, 100*time.Millisecond
	p := newAsyncOutboxPublisher(t, w)
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
	var (
		mu       sync.Mutex
		returned bool
		reported []int
	)
	err := p.PublishEach(short, msgs, func(i int, _ error) {
		mu.Lock()
		defer mu.Unlock()
		if returned {
			t.Errorf("message %d reported after PublishEach returned", i)
		}
		reported = append(reported, i)
	})
	mu.Lock()
	returned = true
	require.Empty(t, reported, "nothing acknowledged with the broker down")
	mu.Unlock()
	require.ErrorIs(t, err, context.DeadlineExceeded)

	cluster = start()
	t.Cleanup(cluster.Close)
	again := []outbox.Message{
		{ID: "1", Destination: topic, OrderingKey: "a", Body: []byte("x")},
		{ID: "2", Destination: topic, OrderingKey: "b", Body: []byte("x")},
	}
	require.NoError(t, p.Publish(ctx, again), "the cluster is back")
	// kafka-go's retries of the abandoned call land too, reported nowhere.
	got, err := readTopic(ctx, brokers, topic, 4)
	require.NoError(t, err)
	require.Len(t, got, 4)
}

// asyncOutboxWriter is outboxWriter, asynchronous.
func asyncOutboxWriter(t *testing.T, brokers []string, b kafka.Balancer) *kafka.Writer {
	t.Helper()
	w := outboxWriter(t, brokers, b)
	w.Async = true
	return w
}

func newAsyncOutboxPublisher(t *testing.T, w *kafka.Writer) *dedupkafka.OutboxPublisher {
	t.Helper()
	p, err := dedupkafka.NewAsyncOutboxPublisher(w)
	require.NoError(t, err)
	return p
}

// TestAsyncOutboxPublisherTooLarge: a message over the writer's
// BatchBytes is reported alone, for good (kafka-go refuses the whole call
// for it); the others of its topic are written.
func TestAsyncOutboxPublisherTooLarge(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	brokers := startKafka(t, 1, topic)
	w := asyncOutboxWriter(t, brokers, nil)
	w.BatchBytes = 1 << 10
	p := newAsyncOutboxPublisher(t, w)
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
