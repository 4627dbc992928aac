package bench

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup"
	dedupredisstream "github.com/dedup-go/dedup/adapters/redisstream"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/redisstore"
)

// The defaults of dedupredisstream's Options.Batch and Concurrency, which
// the bare loop matches.
const (
	rsBatch   = 32
	rsWorkers = 8
)

// ackClock ends a Redis Streams side's clock at its n-th XACK, not at its
// n-th handler call: the bare loop counts its own XACKs, the adapter's
// Observer hears each delivery once it was acknowledged. It starts, as the
// other broker rows do, at the first order handled (the tally's).
type ackClock struct {
	n       int64
	acked   atomic.Int64
	last    atomic.Int64 // Unix nanoseconds of the n-th XACK
	cpuLast atomic.Int64
	done    chan struct{}
}

func newAckClock(n int) *ackClock { return &ackClock{n: int64(n), done: make(chan struct{})} }

func (a *ackClock) ack() {
	if a.acked.Add(1) == a.n {
		a.cpuLast.Store(int64(processCPU()))
		a.last.Store(time.Now().UnixNano())
		close(a.done)
	}
}

// sample is the rate from the first order handled to the last XACK.
func (a *ackClock) sample(t *tally) sample {
	elapsed := time.Duration(a.last.Load() - t.first.Load())
	return sample{
		value:   float64(t.n) / max(elapsed, time.Nanosecond).Seconds(),
		cpu:     float64(a.cpuLast.Load()-t.cpuFirst.Load()) / float64(t.n),
		closing: time.Since(time.Unix(0, a.last.Load())),
	}
}

// redisStreamRun adds n orders to a stream of their own (a pipeline of
// XADDs, before the clock), creates the group, runs consume, checks that
// every order was handled once and nothing is left pending, and deletes
// the stream.
func redisStreamRun(tb testing.TB, c *redis.Client, n int, side string, consume func(stream string, t *tally, a *ackClock)) sample {
	ctx := context.Background()
	stream := uniqueName("rs")
	defer func() {
		if err := c.Del(context.Background(), stream).Err(); err != nil {
			tb.Errorf("delete stream %s: %v", stream, err)
		}
	}()
	bodies, keys := ordersJSON(n)
	for lo := 0; lo < n; lo += 1000 {
		if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := lo; i < min(lo+1000, n); i++ {
				p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"message-id", keys[i], "data", bodies[i]}})
			}
			return nil
		}); err != nil {
			tb.Fatal(err)
		}
	}
	if err := c.XGroupCreate(ctx, stream, "g", "0").Err(); err != nil {
		tb.Fatal(err)
	}
	t, a := newTally(n), newAckClock(n)
	consume(stream, t, a)
	t.check(tb, side)
	p, err := c.XPending(ctx, stream, "g").Result()
	if err != nil || p.Count != 0 {
		tb.Fatalf("%s: %v entries left pending (%v)", side, p, err)
	}
	return a.sample(t)
}

// bareRedisStream is the consumer a user would write: one reader
// (XREADGROUP, rsBatch entries, blocking), rsWorkers workers decoding,
// handling and acknowledging each entry (XACK), each handling first, when
// perEntry is given, calling it (the store's own commands).
func bareRedisStream(tb testing.TB, c *redis.Client, stream string, t *tally, a *ackClock, perEntry func(id string) error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	work := make(chan redis.XMessage, rsBatch)
	var wg sync.WaitGroup
	for range rsWorkers {
		wg.Go(func() {
			for m := range work {
				body, _ := m.Values["data"].(string)
				o, err := decode([]byte(body))
				if err != nil {
					tb.Error(err)
					continue
				}
				if perEntry != nil {
					if err := perEntry(o.ID); err != nil {
						tb.Error(err)
						continue
					}
				}
				t.add(o)
				if err := c.XAck(ctx, stream, "g", m.ID).Err(); err != nil {
					tb.Error(err)
					continue
				}
				a.ack()
			}
		})
	}
	read := 0
	for read < t.n {
		res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "bare", Streams: []string{stream, ">"},
			Count: rsBatch, Block: time.Second}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			tb.Fatal(err)
		}
		for _, s := range res {
			for _, m := range s.Messages {
				work <- m
				read++
			}
		}
	}
	close(work)
	testenv.Recv(tb, a.done, "every order acknowledged")
	testenv.Wait(tb, &wg, "the workers")
}

// dedupRedisStream is the adapter's Consumer with the same batch and
// workers, over st, in a namespace of the run's own.
func dedupRedisStream(tb testing.TB, c *redis.Client, st store.Store, stream string, t *tally, a *ackClock) {
	rcv, err := dedup.NewReceiver(st, idstrategy.BodyField("id", func(o order) string { return o.ID }),
		func(_ context.Context, m *dedup.Message[order]) (struct{}, error) {
			t.add(m.Body)
			return struct{}{}, nil
		}, &dedup.Config{Namespace: strings.TrimSuffix(runPrefix("rs"), ":"), Observer: delivery.ObserverFunc(func(_ context.Context, e delivery.Event) {
			if e.Decision.Action == delivery.Ack && e.SettleErr == nil {
				a.ack()
			}
		})})
	if err != nil {
		tb.Fatal(err)
	}
	k, err := dedupredisstream.NewConsumer(c, stream, "g", rcv, &dedupredisstream.Options{
		Consumer: "dedup", Batch: rsBatch, Concurrency: rsWorkers, DropPoison: true})
	if err != nil {
		tb.Fatal(err)
	}
	if err := k.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	testenv.Recv(tb, a.done, "every order acknowledged")
	ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	if err := k.Stop(ctx); err != nil {
		tb.Fatal(err)
	}
}

// cmdCounter counts, as a go-redis hook, the commands a client sends
// and its round trips (a pipeline is one).
type cmdCounter struct {
	mu    sync.Mutex
	names map[string]int
	trips int
}

func (k *cmdCounter) reset() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.names, k.trips = map[string]int{}, 0
}

func (k *cmdCounter) count(cmds ...redis.Cmder) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.names == nil {
		k.names = map[string]int{}
	}
	k.trips++
	for _, c := range cmds {
		name := strings.ToLower(c.Name())
		if name == "evalsha" || name == "eval" {
			name += " (script)"
		}
		k.names[name]++
	}
}

func (k *cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (k *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		k.count(cmd)
		return next(ctx, cmd)
	}
}

func (k *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		k.count(cmds...)
		return next(ctx, cmds)
	}
}

// log logs the commands and round trips per message since the reset.
func (k *cmdCounter) log(tb testing.TB, side string, n int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(k.names)) {
		parts = append(parts, name+" "+strconv.FormatFloat(float64(k.names[name])/float64(n), 'f', 2, 64))
	}
	tb.Logf("%s: %.2f round trips per message (%s)", side, float64(k.trips)/float64(n), strings.Join(parts, ", "))
}

// startCountedRedis is startRedis with its commands counted.
func startCountedRedis(tb testing.TB) (*redis.Client, *cmdCounter) {
	c := startRedis(tb)
	k := &cmdCounter{}
	c.AddHook(k)
	return c, k
}

func init() {
	ctx := context.Background()
	register(row{
		name: "Redis Streams consumer, memstore, trivial handler",
		unit: "msgs/s", n: 20000, cpu: true,
		setup: func(tb testing.TB) []side {
			c := startRedis(tb)
			return []side{
				{name: "bare XREADGROUP (32) + XACK, 8 workers", run: func(tb testing.TB, n int) sample {
					return redisStreamRun(tb, c, n, "bare", func(stream string, t *tally, a *ackClock) {
						bareRedisStream(tb, c, stream, t, a, nil)
					})
				}},
				{name: "dedupredisstream Consumer, memstore", run: func(tb testing.TB, n int) sample {
					return redisStreamRun(tb, c, n, "dedup", func(stream string, t *tally, a *ackClock) {
						dedupRedisStream(tb, c, orderStore(tb, n), stream, t, a)
					})
				}},
			}
		},
	}, row{
		name: "Redis Streams consumer, redisstore on the same Redis",
		unit: "msgs/s", n: 20000, cpu: true,
		setup: func(tb testing.TB) []side {
			c, k := startCountedRedis(tb)
			st, err := redisstore.New(ctx, c, nil)
			if err != nil {
				tb.Fatal(err)
			}
			const lease = 30 * time.Second
			return []side{
				{name: "bare XREADGROUP (32) + XACK, 8 workers", run: func(tb testing.TB, n int) sample {
					return redisStreamRun(tb, c, n, "bare", func(stream string, t *tally, a *ackClock) {
						k.reset()
						bareRedisStream(tb, c, stream, t, a, nil)
						k.log(tb, "bare", n)
					})
				}},
				{name: "ceiling: bare + redisstore Acquire + Complete per entry", run: func(tb testing.TB, n int) sample {
					prefix := runPrefix("ceiling")
					return redisStreamRun(tb, c, n, "ceiling", func(stream string, t *tally, a *ackClock) {
						k.reset()
						bareRedisStream(tb, c, stream, t, a, func(id string) error {
							cl, err := st.Acquire(ctx, store.AcquireRequest{Key: prefix + id, Lease: lease})
							if err != nil {
								return err
							}
							return st.Complete(ctx, store.CompleteRequest{Key: prefix + id, Token: cl.Token, Result: []byte("{}"), Retention: 24 * time.Hour})
						})
						k.log(tb, "ceiling", n)
					})
				}},
				{name: "dedupredisstream Consumer, redisstore", run: func(tb testing.TB, n int) sample {
					return redisStreamRun(tb, c, n, "dedup", func(stream string, t *tally, a *ackClock) {
						k.reset()
						dedupRedisStream(tb, c, st, stream, t, a)
						k.log(tb, "dedup", n)
					})
				}},
			}
		},
		versus: []versus{{name: "dedup over the ceiling", a: 2, b: 1}},
	})
}
