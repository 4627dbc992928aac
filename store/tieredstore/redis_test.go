package tieredstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/internal/redistest"
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

// TestLocalHitNoRedisCall: a duplicate answered by the local tier sends no
// command to Redis; the same duplicate through a second process's tiered
// store goes to Redis once, then is local too.
func TestLocalHitNoRedisCall(t *testing.T) {
	c := redistest.Client(t)
	hook := &commandCounter{}
	c.AddHook(hook)
	prefix := redistest.Prefix(t, c)
	var runs atomic.Int64
	newRcv := func() *dedup.Receiver[string, string] {
		rcv, err := dedup.NewReceiver(overRedis(t, c, prefix), func(id string) (string, error) { return id, nil },
			func(_ context.Context, id string) (string, error) {
				runs.Add(1)
				return "receipt-" + id, nil
			}, &dedup.Config{Namespace: "pay"})
		require.NoError(t, err)
		return rcv
	}
	first, second := newRcv(), newRcv()
	ctx := t.Context()

	res, err := first.Handle(ctx, "p1")
	require.NoError(t, err)
	require.Equal(t, dedup.StatusProcessed, res.Status)
	before := hook.n.Load()
	require.Positive(t, before, "the hook sees the commands of a new message")
	for range 100 {
		res, err := first.Handle(ctx, "p1")
		require.NoError(t, err)
		require.Equal(t, dedup.StatusDuplicate, res.Status)
		require.Equal(t, "receipt-p1", res.Value)
	}
	require.Equal(t, before, hook.n.Load(), "local hits sent commands to Redis")

	res, err = second.Handle(ctx, "p1")
	require.NoError(t, err)
	require.Equal(t, dedup.StatusDuplicate, res.Status)
	require.Equal(t, "receipt-p1", res.Value)
	require.Equal(t, before+1, hook.n.Load(), "the other process asks Redis once")
	for range 100 {
		_, err := second.Handle(ctx, "p1")
		require.NoError(t, err)
	}
	require.Equal(t, before+1, hook.n.Load(), "then answers from its own memory")
	require.EqualValues(t, 1, runs.Load())
}

// TestTwoProcesses: two receivers with a tiered store each (two processes)
// share one Redis; 1,000 payments are delivered 3 times each, spread over
// both at random and concurrently. Every payment is charged exactly once and
// every delivery is acknowledged with the first receipt.
func TestTwoProcesses(t *testing.T) {
	c := redistest.Client(t)
	prefix := redistest.Prefix(t, c)
	const payments, copies, workers = 1000, 3, 16

	var mu sync.Mutex
	charges := map[string]int{}
	newRcv := func(name string) *dedup.Receiver[string, string] {
		rcv, err := dedup.NewReceiver(overRedis(t, c, prefix), func(id string) (string, error) { return id, nil },
			func(_ context.Context, id string) (string, error) {
				time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond) // a charge takes a while
				mu.Lock()
				defer mu.Unlock()
				charges[id]++
				return name + "/" + id, nil
			}, &dedup.Config{Namespace: "pay", Lease: 10 * time.Second})
		require.NoError(t, err)
		return rcv
	}
	procs := []*dedup.Receiver[string, string]{newRcv("A"), newRcv("B")}

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
	receipts := make(map[string]map[string]bool) // id -> receipts acked
	var wg sync.WaitGroup
	ctx := t.Context()
	for range workers {
		wg.Go(func() {
			for d := range work {
				for {
					res, err := procs[d.proc].Handle(ctx, d.id)
					dec := dedup.Decide(res, err, procs[d.proc].Policy())
					if dec.Action == dedup.Retry { // in flight in the other process
						time.Sleep(time.Millisecond)
						continue
					}
					if dec.Action != dedup.Ack {
						t.Errorf("%s: %v %v", d.id, dec.Action, dec.Err)
						break
					}
					mu.Lock()
					if receipts[d.id] == nil {
						receipts[d.id] = map[string]bool{}
					}
					receipts[d.id][res.Value] = true
					mu.Unlock()
					break
				}
			}
		})
	}
	for _, d := range queue {
		work <- d
	}
	close(work)
	wg.Wait()

	require.Len(t, charges, payments, "payments lost")
	for id, n := range charges {
		require.Equal(t, 1, n, "payment %s charged %d times", id, n)
		require.Len(t, receipts[id], 1, "payment %s: every delivery gets the first receipt", id)
	}
}
