package dedupfranz_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	dedupfranz "github.com/dedup-go/dedup/adapters/franz"
	"github.com/dedup-go/dedup/idstrategy"
)

// TestRetryTopic: a handler error is written to the retry topic (not
// retried in place), the records behind it go on, and the Consumer of the
// retry topic hands it over again no sooner than its tier, with the
// original's position; it then has its one effect.
func TestRetryTopic(t *testing.T) {
	const topic = "rt"
	tier := 300 * time.Millisecond
	retryTopic := adapter.RetryName(topic, tier)
	cluster := startCluster(t, 1, topic, retryTopic)
	addrs := cluster.ListenAddrs()
	prod := newProducer(t, addrs)
	produce(t, prod, orderRecord(t, topic, 0, 0), orderRecord(t, topic, 0, 1), orderRecord(t, topic, 0, 2))
	fx := newEffects()
	var failed atomic.Bool
	var failedAt atomic.Int64
	var retriedFrom atomic.Value
	cfg := fastConfig("rt")
	cfg.Backoff = dedup.BackoffFunc(func(int) time.Duration { return tier })
	rcv, err := dedup.NewReceiver(newStore(t), idstrategy.BodyField("id", func(o Order) string { return o.ID }),
		func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
			if m.Body.ID == orderID(0) && failed.CompareAndSwap(false, true) {
				failedAt.Store(time.Now().UnixNano())
				return Receipt{}, errors.New("not now")
			}
			if m.Body.ID == orderID(0) {
				retriedFrom.Store([3]any{m.Source, m.Stream, time.Now().UnixNano()})
			}
			fx.add(m.Partition, m.Body.ID)
			return Receipt{OrderID: m.Body.ID}, nil
		}, cfg)
	require.NoError(t, err)
	opts := &dedupfranz.Options{DropPoison: true, RetryTopics: []time.Duration{tier}, CommitInterval: 20 * time.Millisecond}
	main, err := dedupfranz.NewConsumer(clientOpts(addrs), "g-rt", []string{topic}, rcv, opts)
	require.NoError(t, err)
	start(t, main)
	retry, err := dedupfranz.NewConsumer(clientOpts(addrs), "g-rt", []string{retryTopic}, rcv, opts)
	require.NoError(t, err)
	start(t, retry)
	eventually(t, 15*time.Second, func() bool { return fx.Count(orderID(0)) == 1 }, "the retried order's effect")
	require.Equal(t, []string{orderID(1), orderID(2), orderID(0)}, fx.order(0), "the records behind the failed one went on")
	require.EqualValues(t, 1, main.Stats().RetriedLater)
	require.Zero(t, main.Stats().RetriedInPlace)
	from := retriedFrom.Load().([3]any)
	require.Equal(t, retryTopic, from[0])
	require.Equal(t, topic, from[1])
	require.GreaterOrEqual(t, time.Duration(from[2].(int64)-failedAt.Load()), tier, "handed over before its tier")
}

// TestDeadLetterTopicCheckedAtStart: a missing dead-letter topic fails
// Start, naming it.
func TestDeadLetterTopicCheckedAtStart(t *testing.T) {
	addrs := startCluster(t, 1, "dl").ListenAddrs()
	rcv := newReceiver(t, newStore(t), "dl", func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) { return Receipt{}, nil })
	c, err := dedupfranz.NewConsumer(clientOpts(addrs), "g-dl", []string{"dl"}, rcv, &dedupfranz.Options{DeadLetterTopic: "dl.missing"})
	require.NoError(t, err)
	err = c.Start(context.Background())
	require.ErrorIs(t, err, dedupfranz.ErrDeadLetterTopic)
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)
	require.ErrorContains(t, err, "dl.missing")
}

// TestNewConsumerRefuses: poison needs a destination, and the options the
// Consumer owns are refused.
func TestNewConsumerRefuses(t *testing.T) {
	rcv := newReceiver(t, newStore(t), "cfg", func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) { return Receipt{}, nil })
	seeds := kgo.SeedBrokers("127.0.0.1:1")
	_, err := dedupfranz.NewConsumer([]kgo.Opt{seeds}, "g", []string{"t"}, rcv, nil)
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)
	require.ErrorContains(t, err, "DropPoison")
	for name, opt := range map[string]kgo.Opt{
		"ConsumerGroup":        kgo.ConsumerGroup("other"),
		"ConsumeTopics":        kgo.ConsumeTopics("other"),
		"BlockRebalanceOnPoll": kgo.BlockRebalanceOnPoll(),
		"OnPartitionsRevoked":  kgo.OnPartitionsRevoked(func(context.Context, *kgo.Client, map[string][]int32) {}),
		"RequiredAcks":         kgo.RequiredAcks(kgo.LeaderAck()),
	} {
		opts := []kgo.Opt{seeds, opt}
		if name == "RequiredAcks" {
			opts = append(opts, kgo.DisableIdempotentWrite())
		}
		_, err := dedupfranz.NewConsumer(opts, "g", []string{"t"}, rcv, &dedupfranz.Options{DropPoison: true})
		require.ErrorIs(t, err, dedupfranz.ErrClientConfig, name)
		require.ErrorIs(t, err, dedup.ErrInvalidConfig, name)
	}
	_, err = dedupfranz.NewConsumer([]kgo.Opt{seeds}, "g", []string{"t"}, rcv, &dedupfranz.Options{DropPoison: true})
	require.NoError(t, err)
}
