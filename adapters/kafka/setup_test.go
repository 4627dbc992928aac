package dedupkafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/internal/adaptertest"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	goleak.VerifyTestMain(m)
}

// startKafka starts an in-process Kafka cluster (kfake, which speaks the
// real protocol) with the given topics of partitions each, closed when the
// test ends. Its group session timeout may be as short as 500ms, so that
// tests see rebalances quickly.
func startKafka(t testing.TB, partitions int32, topics ...string) []string {
	t.Helper()
	return startCluster(t, partitions, topics...).ListenAddrs()
}

// startCluster is startKafka, returning the cluster.
func startCluster(t testing.TB, partitions int32, topics ...string) *kfake.Cluster {
	t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(500 * time.Millisecond)}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(partitions, topics...))
	}
	c, err := kfake.NewCluster(opts...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// newReader returns a consumer-group reader with short timeouts, closed
// at the end of the test (after the consumers stopped at cleanup: cleanups
// run last first). The Consumer never closes it.
func newReader(t testing.TB, brokers []string, group string, topics ...string) *kafka.Reader {
	t.Helper()
	r := kafka.NewReader(readerConfig(brokers, group, topics...))
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func readerConfig(brokers []string, group string, topics ...string) kafka.ReaderConfig {
	cfg := kafka.ReaderConfig{
		Brokers:           brokers,
		GroupID:           group,
		MaxWait:           50 * time.Millisecond,
		SessionTimeout:    time.Second,
		HeartbeatInterval: 100 * time.Millisecond,
		RebalanceTimeout:  2 * time.Second,
		JoinGroupBackoff:  100 * time.Millisecond,
		ReadBackoffMin:    10 * time.Millisecond,
		ReadBackoffMax:    100 * time.Millisecond,
		StartOffset:       kafka.FirstOffset,
	}
	if len(topics) == 1 {
		cfg.Topic = topics[0]
	} else {
		cfg.GroupTopics = topics
	}
	return cfg
}

// toPartition is a Balancer that writes each message to its Partition
// field, so that tests decide where orders go.
type toPartition struct{}

func (toPartition) Balance(m kafka.Message, _ ...int) int { return m.Partition }

// newWriter returns a writer of the cluster that acknowledges with all
// replicas and puts messages where their Partition says; closed at the end.
func newWriter(t testing.TB, brokers []string) *kafka.Writer {
	t.Helper()
	tr := &kafka.Transport{}
	w := &kafka.Writer{
		Addr: kafka.TCP(brokers...), Balancer: toPartition{}, RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, BatchSize: 1000, Transport: tr,
	}
	t.Cleanup(func() {
		_ = w.Close()
		tr.CloseIdleConnections()
	})
	return w
}

// Order is the test message.
type Order struct {
	ID    string `json:"id,omitempty"`
	Cents int    `json:"cents"`
}

// Receipt is the handler's result.
type Receipt struct {
	OrderID string `json:"order_id"`
	Charge  int64  `json:"charge"`
}

func orderJSON(t testing.TB, o Order) []byte {
	t.Helper()
	b, err := json.Marshal(o)
	require.NoError(t, err)
	return b
}

func orderID(i int) string { return fmt.Sprintf("o-%05d", i) }

// effects counts side effects per order id (deduptest.Effects) and in
// all, and keeps each partition's order of first effects.
type effects struct {
	deduptest.Effects
	mu     sync.Mutex
	firsts map[int][]string // partition -> ids in the order of their first effect
	total  atomic.Int64
}

func newEffects() *effects { return &effects{firsts: map[int][]string{}} }

func (e *effects) add(partition int, id string) int64 {
	e.mu.Lock()
	if e.Count(id) == 0 {
		e.firsts[partition] = append(e.firsts[partition], id)
	}
	e.Record(id)
	e.mu.Unlock()
	return e.total.Add(1)
}

func (e *effects) order(partition int) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.firsts[partition]...)
}

// endOffsets returns each partition's end offset (the next offset to be
// written).
func endOffsets(t testing.TB, brokers []string, topic string, partitions int) map[int]int64 {
	t.Helper()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: closedAtCleanup(t)}
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for p := range partitions {
		req.Topics[topic] = append(req.Topics[topic], kafka.LastOffsetOf(p))
	}
	resp, err := client.ListOffsets(context.Background(), req)
	require.NoError(t, err)
	out := map[int]int64{}
	for _, p := range resp.Topics[topic] {
		require.NoError(t, p.Error)
		out[p.Partition] = p.LastOffset
	}
	return out
}

// committed returns the group's committed offset of each partition (-1
// for none).
func committed(t testing.TB, brokers []string, group, topic string, partitions int) map[int]int64 {
	t.Helper()
	out, err := fetchCommitted(t, brokers, group, topic, partitions)
	require.NoError(t, err)
	return out
}

// committedTo reports whether the group has committed offset in partition
// 0 of topic. It never fails the test, so a condition polled on another
// goroutine can call it: a group the broker does not know yet (before the
// consumer joined) has committed nothing.
func committedTo(t testing.TB, brokers []string, group, topic string, offset int64) bool {
	out, err := fetchCommitted(t, brokers, group, topic, 1)
	return err == nil && out[0] == offset
}

func fetchCommitted(t testing.TB, brokers []string, group, topic string, partitions int) (map[int]int64, error) {
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: closedAtCleanup(t)}
	var ps []int
	for p := range partitions {
		ps = append(ps, p)
	}
	resp, err := client.OffsetFetch(context.Background(), &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: ps}})
	if err != nil {
		return nil, err
	}
	if resp.Error != nil {
		return nil, resp.Error
	}
	out := map[int]int64{}
	for _, p := range resp.Topics[topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("partition %d: %w", p.Partition, p.Error)
		}
		out[p.Partition] = p.CommittedOffset
	}
	return out, nil
}

func closedAtCleanup(t testing.TB) *kafka.Transport {
	tr := &kafka.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// fastConfig keeps retries fast in tests, and the logs quiet.
func fastConfig(ns string) *dedup.Config {
	return &dedup.Config{
		Namespace:       ns,
		Lease:           2 * time.Second,
		Backoff:         dedup.BackoffFunc(func(int) time.Duration { return 20 * time.Millisecond }),
		StoreRetryDelay: 100 * time.Millisecond,
		Logger:          slog.New(slog.DiscardHandler),
	}
}

// Shared with the other adapters' tests.
var (
	onSettled     = adaptertest.OnSettled
	stopAtCleanup = adaptertest.StopAtCleanup
)

// eventually waits for cond, failing the test after within.
func eventually(t testing.TB, within time.Duration, cond func() bool, what string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, within, 10*time.Millisecond, append([]any{what}, args...)...)
}
