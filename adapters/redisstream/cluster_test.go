package dedupredisstream_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupredisstream "github.com/dedup-go/dedup/adapters/redisstream"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/redistest"
)

// TestCluster runs a Consumer on a Redis Cluster of the test's own (three
// masters) through a redis.ClusterClient: the stream, the group, the
// retry-delay hash, the dead-letter stream and the name lock are keys of
// their own, spread over the masters (no hash tags: every script names one
// key), and each works there: a retry waits its delay, a poison entry is
// dead-lettered with its original id, a dead consumer's entries are taken
// over, an entry deleted while pending is reported, the name is refused to
// a second Consumer, the lag is read, and a clean stop leaves no consumer
// and no lock behind.
func TestCluster(t *testing.T) {
	t.Parallel()
	cc, _ := redistest.StartCluster(t)
	ctx := context.Background()
	const (
		stream = "orders"
		dl     = "orders.dlq"
		group  = "billing"
		delay  = 300 * time.Millisecond
	)
	retryKey := stream + ":dedup-retry:" + group
	lockKey := stream + ":dedup-consumer:" + group + ":a"
	masters := map[string]string{}
	for _, k := range []string{stream, dl, retryKey, lockKey} {
		m, err := cc.MasterForKey(ctx, k)
		require.NoError(t, err)
		masters[k] = m.Options().Addr
	}
	t.Logf("masters of the keys: %v", masters)
	distinct := map[string]bool{}
	for _, a := range masters {
		distinct[a] = true
	}
	require.GreaterOrEqual(t, len(distinct), 2, "the keys should span masters, or the test shows nothing of Cluster")

	// A consumer of the group that died holding three entries; one of
	// them is then deleted from the stream (a trim).
	require.NoError(t, cc.XGroupCreateMkStream(ctx, stream, group, "0").Err())
	var ghost []string
	for i := range 3 {
		ghost = append(ghost, add(t, cc, stream, fmt.Sprint("g-", i), fmt.Sprintf(`{"id":"g-%d"}`, i)))
	}
	require.NoError(t, cc.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "ghost", Streams: []string{stream, ">"}, Count: 3, Block: -1}).Err())
	require.NoError(t, cc.XDel(ctx, stream, ghost[1]).Err())

	var mu sync.Mutex
	runs := map[string][]time.Time{}
	h := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		mu.Lock()
		runs[m.Body.ID] = append(runs[m.Body.ID], time.Now())
		n := len(runs[m.Body.ID])
		mu.Unlock()
		switch {
		case m.Body.ID == "poison":
			return Receipt{}, dedup.Permanent(errors.New("card declined"))
		case m.Body.ID == "flaky" && n == 1:
			return Receipt{}, errors.New("payment service timed out")
		}
		return Receipt{OrderID: m.Body.ID}, nil
	}
	cfg := fastConfig("billing")
	cfg.Backoff = dedup.BackoffFunc(func(int) time.Duration { return delay })
	obs := &events{}
	cfg.Observer = obs
	rcv := newReceiver(t, h, cfg)
	opts := &dedupredisstream.Options{Consumer: "a", DeadLetterStream: dl, Block: 50 * time.Millisecond,
		ClaimIdle: 100 * time.Millisecond, ClaimInterval: 50 * time.Millisecond}
	k, err := dedupredisstream.NewConsumer(cc, stream, group, rcv, opts)
	require.NoError(t, err)
	require.NoError(t, k.Start(ctx))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			sctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			_ = k.Stop(sctx)
		}
	})
	add(t, cc, stream, "flaky", `{"id":"flaky"}`)
	poisonID := add(t, cc, stream, "poison", `{"id":"poison"}`)
	add(t, cc, stream, "fine", `{"id":"fine"}`)

	// The name is this live Consumer's.
	twin, err := dedupredisstream.NewConsumer(cc, stream, group, rcv, opts)
	require.NoError(t, err)
	require.ErrorIs(t, twin.Start(ctx), dedupredisstream.ErrConsumerInUse)

	eventually(t, func() bool {
		s := k.Stats()
		return s.Acked == 4 && s.DeadLettered == 1 && s.Trimmed == 1 && s.RetriedInPlace == 1
	}, "g-0, g-2, fine and flaky acked, poison dead-lettered, g-1 reported trimmed")
	require.Equal(t, []string{ghost[1]}, obs.trimmed())

	mu.Lock()
	require.Len(t, runs["flaky"], 2)
	require.GreaterOrEqual(t, runs["flaky"][1].Sub(runs["flaky"][0]), delay, "the retry ran before its delay")
	for _, id := range []string{"g-0", "g-2", "fine", "poison"} {
		require.Len(t, runs[id], 1, id)
	}
	require.NotContains(t, runs, "g-1", "a deleted entry has nothing to run")
	mu.Unlock()

	letters, err := cc.XRange(ctx, dl, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, letters, 1)
	require.Equal(t, poisonID, letters[0].Values[delivery.HeaderOffset])
	require.Equal(t, "poison", letters[0].Values[delivery.HeaderOriginalMessageID])
	require.Equal(t, stream, letters[0].Values[delivery.HeaderSource])

	eventually(t, func() bool { return k.Stats().Lag == 0 }, "the lag read as 0")
	pending, err := cc.XPending(ctx, stream, group).Result()
	require.NoError(t, err)
	require.Zero(t, pending.Count, "entries left pending")
	n, err := cc.HLen(ctx, retryKey).Result()
	require.NoError(t, err)
	require.Zero(t, n, "next-attempt times left in the retry hash")

	sctx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	require.NoError(t, k.Stop(sctx))
	stopped = true
	consumers, err := cc.XInfoConsumers(ctx, stream, group).Result()
	require.NoError(t, err)
	for _, c := range consumers {
		require.NotEqual(t, "a", c.Name, "a stopped consumer that owns nothing stays in the group")
	}
	require.Zero(t, cc.Exists(ctx, lockKey).Val(), "the name lock left behind")
}
