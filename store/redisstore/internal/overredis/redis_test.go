package overredis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/redisstore"
	"github.com/dedup-go/dedup/store/storetest"
	"github.com/dedup-go/dedup/store/tieredstore"
)

// overRedis returns a tiered store over a redisstore under prefix on c.
// Redis runs on this machine, so its clock is this one's: a small
// ClockSkew lets records learned from it be cached even for the suite's
// short retentions.
func overRedis(t testing.TB, c redis.UniversalClient, prefix string) *tieredstore.Store {
	t.Helper()
	remote, err := redisstore.New(context.Background(), c, &redisstore.Options{Prefix: prefix})
	require.NoError(t, err)
	s, err := tieredstore.New(remote, &tieredstore.Options{ClockSkew: 5 * time.Millisecond})
	require.NoError(t, err)
	return s
}

func TestConformanceOverRedis(t *testing.T) {
	c := redistest.Client(t)
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		return storetest.Harness{
			Store:   overRedis(t, c, redistest.Prefix(t, c)),
			Advance: time.Sleep,
			Tick:    50 * time.Millisecond,
			// Redis's clock: with it the suite tells a check that ran too
			// late on a busy machine (and runs it again with a longer Tick)
			// from a broken rule.
			Now: func() time.Time {
				now, err := c.Time(t.Context()).Result()
				require.NoError(t, err)
				return now
			},
		}
	})
}

// commandCounter is a go-redis hook counting the commands sent to Redis,
// pipelined ones included.
type commandCounter struct{ n atomic.Int64 }

func (h *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// errInFlight: deliver gave up waiting for another delivery's claim.
var errInFlight = errors.New("still in flight")

// deliver handles one delivery of key through s the way a receiver does:
// a completed record in memory answers at once (Peek), else Acquire claims
// the key or reports who holds it. A claim runs handle and completes the
// record with its result; a completed record replays its result; a claim
// in flight elsewhere is waited for, up to ctx's deadline.
func deliver(ctx context.Context, s *tieredstore.Store, key string, handle func() string) (string, error) {
	for {
		if rec := s.Peek(store.SplitKey(key)); rec != nil {
			return string(rec.Result), nil
		}
		c, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: 10 * time.Second})
		if err != nil {
			return "", err
		}
		switch {
		case c.Acquired:
			result := handle()
			err := s.Complete(ctx, store.CompleteRequest{Key: key, Token: c.Token, Result: []byte(result), Retention: time.Hour})
			return result, err
		case c.Record.State == store.StateCompleted:
			return string(c.Record.Result), nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%s: %w: %w", key, errInFlight, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// TestLocalHitNoRedisCall: a duplicate answered by the local tier sends no
// command to Redis; the same duplicate through a second process's tiered
// store goes to Redis once, then is local too.
func TestLocalHitNoRedisCall(t *testing.T) {
	c := redistest.Client(t)
	hook := &commandCounter{}
	c.AddHook(hook)
	prefix := redistest.Prefix(t, c)
	var runs atomic.Int64
	handle := func() string {
		runs.Add(1)
		return "receipt-p1"
	}
	first, second := overRedis(t, c, prefix), overRedis(t, c, prefix)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	res, err := deliver(ctx, first, "pay:p1", handle)
	require.NoError(t, err)
	require.Equal(t, "receipt-p1", res)
	before := hook.n.Load()
	require.Positive(t, before, "the hook sees the commands of a new message")
	for range 100 {
		res, err := deliver(ctx, first, "pay:p1", handle)
		require.NoError(t, err)
		require.Equal(t, "receipt-p1", res)
		dup, err := first.Acquire(ctx, store.AcquireRequest{Key: "pay:p1", Lease: time.Second})
		require.NoError(t, err)
		require.Equal(t, store.StateCompleted, dup.Record.State)
	}
	require.Equal(t, before, hook.n.Load(), "local hits sent commands to Redis")

	res, err = deliver(ctx, second, "pay:p1", handle)
	require.NoError(t, err)
	require.Equal(t, "receipt-p1", res)
	require.Equal(t, before+1, hook.n.Load(), "the other process asks Redis once")
	for range 100 {
		_, err := deliver(ctx, second, "pay:p1", handle)
		require.NoError(t, err)
	}
	require.Equal(t, before+1, hook.n.Load(), "then answers from its own memory")
	require.EqualValues(t, 1, runs.Load())
}

// TestLocalCopyKeepsLastErrorOverRedis: the local copy of a record
// completed after a failed attempt equals the Redis record but for its
// expiry, last error included.
func TestLocalCopyKeepsLastErrorOverRedis(t *testing.T) {
	c := redistest.Client(t)
	s := overRedis(t, c, redistest.Prefix(t, c))
	ctx := t.Context()
	first := acquire(t, s, "ns:k", "fp")
	require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: "ns:k", Token: first.Token, Error: "boom", Retention: time.Hour}))
	retry := acquire(t, s, "ns:k", "fp")
	require.Equal(t, "boom", retry.Record.LastError)
	complete(t, s, "ns:k", retry.Token, "ok")

	want, err := s.Get(ctx, "ns:k") // the remote's record
	require.NoError(t, err)
	local := s.Peek("ns:", "k")
	require.NotNil(t, local)
	require.False(t, local.ExpiresAt.After(want.ExpiresAt), "the local copy outlives the remote record")
	require.Equal(t, retry.Token, local.Token)
	require.True(t, local.CompletedAt.IsZero(), "the local copy's CompletedAt is a guess")
	want.ExpiresAt, want.CompletedAt = local.ExpiresAt, time.Time{}
	require.Equal(t, want, *local)
	require.Equal(t, "boom", local.LastError)
	require.Equal(t, 2, local.Attempt)
}

// TestTwoProcesses: two tiered stores (two processes) share one Redis;
// 1,000 payments are delivered 3 times each, spread over both at random
// and concurrently. Every payment is charged exactly once and every
// delivery is answered with the first receipt.
func TestTwoProcesses(t *testing.T) {
	c := redistest.Client(t)
	prefix := redistest.Prefix(t, c)
	const payments, copies, workers = 1000, 3, 16

	var mu sync.Mutex
	charges := map[string]int{}
	procs := []*tieredstore.Store{overRedis(t, c, prefix), overRedis(t, c, prefix)}
	names := []string{"A", "B"}

	type delivery struct {
		id   string
		proc int
	}
	var queue []delivery
	for i := range payments {
		for range copies {
			queue = append(queue, delivery{fmt.Sprintf("p%04d", i), rand.IntN(2)})
		}
	}
	rand.Shuffle(len(queue), func(i, j int) { queue[i], queue[j] = queue[j], queue[i] })
	work := make(chan delivery)
	receipts := make(map[string]map[string]bool) // id -> receipts answered
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for d := range work {
				res, err := deliver(ctx, procs[d.proc], "pay:"+d.id, func() string {
					time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond) // a charge takes a while
					mu.Lock()
					defer mu.Unlock()
					charges[d.id]++
					return names[d.proc] + "/" + d.id
				})
				if err != nil {
					t.Errorf("%s: %v", d.id, err)
					continue
				}
				mu.Lock()
				if receipts[d.id] == nil {
					receipts[d.id] = map[string]bool{}
				}
				receipts[d.id][res] = true
				mu.Unlock()
			}
		})
	}
	for _, d := range queue {
		work <- d
	}
	close(work)
	testenv.Wait(t, &wg, "the deliveries to return")

	require.Len(t, charges, payments, "payments lost")
	for id, n := range charges {
		require.Equal(t, 1, n, "payment %s charged %d times", id, n)
		require.Len(t, receipts[id], 1, "payment %s: every delivery gets the first receipt", id)
	}
}
