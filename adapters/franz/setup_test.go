package dedupfranz_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/adaptertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// kfakeReads is the goroutine kfake starts per request a connection
// reads; a client closed a moment ago may leave one finishing.
const kfakeReads = "github.com/twmb/franz-go/pkg/kfake.(*clientConn).read.func1"

// startCluster starts an in-process Kafka cluster (kfake, which speaks the
// real protocol) with the given topics of partitions each, closed when the
// test ends. Its group session timeout may be as short as 500ms, so that
// tests see rebalances quickly.
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

// clientOpts are the kgo options of a test consumer: short timeouts, so
// that rebalances take a fraction of a second.
func clientOpts(addrs []string, extra ...kgo.Opt) []kgo.Opt {
	return append([]kgo.Opt{
		kgo.SeedBrokers(addrs...),
		kgo.SessionTimeout(time.Second),
		kgo.HeartbeatInterval(100 * time.Millisecond),
		kgo.RebalanceTimeout(5 * time.Second),
		kgo.FetchMaxWait(50 * time.Millisecond),
		kgo.MetadataMinAge(50 * time.Millisecond),
		kgo.MetadataMaxAge(time.Second),
		kgo.RetryBackoffFn(func(int) time.Duration { return 20 * time.Millisecond }),
	}, extra...)
}

// newProducer returns a client that produces each record to its Partition
// field, acknowledged by all in-sync replicas; closed at the end.
func newProducer(t testing.TB, addrs []string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0), kgo.MetadataMinAge(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// produce produces records and fails the test unless each is stored.
func produce(t testing.TB, cl *kgo.Client, records ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, records...).FirstErr())
}

// createTopics creates topics of partitions each.
func createTopics(t testing.TB, addrs []string, partitions int32, topics ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	require.NoError(t, err)
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	for _, name := range topics {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, 1
		req.Topics = append(req.Topics, rt)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	require.NoError(t, err)
	for _, rt := range resp.Topics {
		require.Zero(t, rt.ErrorCode, "create topic %s", rt.Topic)
	}
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

// orderRecord is the record of order i in partition part of topic.
func orderRecord(t testing.TB, topic string, part int32, i int) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: part, Value: orderJSON(t, Order{ID: orderID(i), Cents: i})}
}

// effects counts side effects per order id and keeps each partition's
// order of first effects.
type effects struct {
	deduptest.Effects
	mu     sync.Mutex
	firsts map[int][]string // partition -> ids in the order of their first effect
}

func newEffects() *effects { return &effects{firsts: map[int][]string{}} }

func (e *effects) add(partition int, id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.Count(id) == 0 {
		e.firsts[partition] = append(e.firsts[partition], id)
	}
	e.Record(id)
}

func (e *effects) order(partition int) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.firsts[partition]...)
}

// committed returns the group's committed offset of each partition of
// topic (-1 for none), or an error.
func committed(ctx context.Context, addrs []string, group, topic string, partitions int32) (map[int32]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = topic
	for p := range partitions {
		rt.Partitions = append(rt.Partitions, p)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			out[p.Partition] = p.Offset
		}
	}
	return out, nil
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
var stopAtCleanup = adaptertest.StopAtCleanup

// eventually waits for cond, failing the test after within.
func eventually(t testing.TB, within time.Duration, cond func() bool, what string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, within, 10*time.Millisecond, append([]any{what}, args...)...)
}

// dedupObserver signals done once per settled delivery.
func dedupObserver(done chan<- struct{}) delivery.Observer {
	return adaptertest.OnSettled(func(delivery.Event) { done <- struct{}{} })
}
