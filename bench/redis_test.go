package bench

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store/redisstore"
)

// The Redis rows run against a redis-server of their own, so that resetting
// its command statistics never touches the shared one.
func startRedis(tb testing.TB) *redis.Client {
	srv := redistest.StartServer(tb)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 32})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

func newRedisReceiver(tb testing.TB, c *redis.Client) *dedup.Receiver[order, struct{}] {
	st, err := redisstore.New(context.Background(), c, nil)
	if err != nil {
		tb.Fatal(err)
	}
	rcv, err := dedup.NewReceiver(st, orderID, nothing, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return rcv
}

// run is a counter that gives every run of every side its own ids.
var runs struct {
	sync.Mutex
	n int
}

func runPrefix(side string) string {
	runs.Lock()
	defer runs.Unlock()
	runs.n++
	return side + strconv.Itoa(runs.n) + ":"
}

// parallel runs op for ids 0..n-1 from workers goroutines.
func parallel(n, workers int, op func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int, workers)
	for range workers {
		wg.Go(func() {
			for i := range next {
				op(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// redisCPU returns the microseconds of Redis CPU that work cost per
// operation, from INFO commandstats, less the statistics commands.
func redisCPU(tb testing.TB, c *redis.Client, n int, work func()) sample {
	ctx := context.Background()
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		tb.Fatal(err)
	}
	work()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var usec float64
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" || name == "cmdstat_config|resetstat" {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				f, _ := strconv.ParseFloat(v, 64)
				usec += f
			}
		}
	}
	return sample{value: usec / float64(n)}
}

func init() {
	ctx := context.Background()
	const lease = 30 * time.Second
	setNX := func(c *redis.Client, key string) error { return c.SetNX(ctx, key, "1", lease).Err() }
	setNXSet := func(c *redis.Client, key string) error {
		if err := c.SetNX(ctx, key, "1", lease).Err(); err != nil {
			return err
		}
		return c.Set(ctx, key, "done", 24*time.Hour).Err()
	}
	handle := func(tb testing.TB, rcv *dedup.Receiver[order, struct{}], id string) {
		if res, err := rcv.Handle(ctx, order{ID: id}); err != nil || res.Status != dedup.StatusProcessed {
			tb.Fatalf("status %v, %v", res.Status, err)
		}
	}
	register(row{
		name: "new message on Redis, sequential",
		unit: "ns/op", n: 3000,
		aim: "dedup <= 2.3x one SET NX",
		setup: func(tb testing.TB) []side {
			c := startRedis(tb)
			rcv := newRedisReceiver(tb, c)
			return []side{
				{name: "SET NX PX (one round trip)", run: func(tb testing.TB, n int) sample {
					keys := ids(runPrefix("setnx"), n)
					return timed(n, func(i int) {
						if err := setNX(c, keys[i]); err != nil {
							tb.Fatal(err)
						}
					})
				}},
				{name: "dedup Handle, redisstore", run: func(tb testing.TB, n int) sample {
					keys := ids(runPrefix("dedup"), n)
					return timed(n, func(i int) { handle(tb, rcv, keys[i]) })
				}},
			}
		},
	}, row{
		name: "new messages on Redis, 16 goroutines",
		unit: "msgs/s", n: 10000,
		aim: "dedup >= 0.85x SET NX + SET",
		setup: func(tb testing.TB) []side {
			c := startRedis(tb)
			rcv := newRedisReceiver(tb, c)
			return []side{
				{name: "SET NX + SET", run: func(tb testing.TB, n int) sample {
					keys := ids(runPrefix("setnxset"), n)
					return rate(n, func() {
						parallel(n, 16, func(i int) {
							if err := setNXSet(c, keys[i]); err != nil {
								tb.Error(err)
							}
						})
					})
				}},
				{name: "dedup Handle, redisstore", run: func(tb testing.TB, n int) sample {
					keys := ids(runPrefix("dedup"), n)
					return rate(n, func() { parallel(n, 16, func(i int) { handle(tb, rcv, keys[i]) }) })
				}},
			}
		},
	}, row{
		name: "HandleBatch(100) on Redis",
		unit: "msgs/s", n: 20000,
		aim: "dedup >= 0.60x the pipeline",
		setup: func(tb testing.TB) []side {
			c := startRedis(tb)
			rcv := newRedisReceiver(tb, c)
			const size = 100
			return []side{
				{name: "pipeline of 100 SET NX + 100 SET", run: func(tb testing.TB, n int) sample {
					keys := ids(runPrefix("pipe"), n)
					return rate(n, func() {
						for lo := 0; lo < n; lo += size {
							batch := keys[lo:min(lo+size, n)]
							if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
								for _, k := range batch {
									p.SetNX(ctx, k, "1", lease)
								}
								return nil
							}); err != nil {
								tb.Fatal(err)
							}
							if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
								for _, k := range batch {
									p.Set(ctx, k, "done", 24*time.Hour)
								}
								return nil
							}); err != nil {
								tb.Fatal(err)
							}
						}
					})
				}},
				{name: "dedup HandleBatch(100), redisstore", run: func(tb testing.TB, n int) sample {
					keys := ids(runPrefix("batch"), n)
					msgs := make([]order, size)
					return rate(n, func() {
						for lo := 0; lo < n; lo += size {
							batch := msgs[:min(size, n-lo)]
							for i := range batch {
								batch[i] = order{ID: keys[lo+i]}
							}
							for _, out := range rcv.HandleBatch(ctx, batch) {
								if out.Err != nil || out.Result.Status != dedup.StatusProcessed {
									tb.Fatalf("status %v, %v", out.Result.Status, out.Err)
								}
							}
						}
					})
				}},
			}
		},
	}, row{
		name: "Redis CPU per new message",
		unit: "µs", n: 3000,
		aim: "dedup <= 10 µs (floor: SET NX + SET)",
		setup: func(tb testing.TB) []side {
			c := startRedis(tb)
			rcv := newRedisReceiver(tb, c)
			return []side{
				{name: "SET NX + SET", run: func(tb testing.TB, n int) sample {
					keys := ids(runPrefix("cpu-set"), n)
					return redisCPU(tb, c, n, func() {
						for _, k := range keys {
							if err := setNXSet(c, k); err != nil {
								tb.Fatal(err)
							}
						}
					})
				}},
				{name: "dedup Handle, redisstore", run: func(tb testing.TB, n int) sample {
					keys := ids(runPrefix("cpu-dedup"), n)
					return redisCPU(tb, c, n, func() {
						for _, k := range keys {
							handle(tb, rcv, k)
						}
					})
				}},
			}
		},
	})
}
