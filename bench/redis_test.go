package bench

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/redisstore"
	"github.com/dedup-go/dedup/store/rueidisstore"
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

// newRueidisReceiver is newRedisReceiver's receiver on rueidisstore, with
// a rueidis client of the same server (auto-pipelining, its default).
func newRueidisReceiver(tb testing.TB, c *redis.Client) *dedup.Receiver[order, struct{}] {
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{c.Options().Addr}, DisableCache: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(rc.Close)
	st, err := rueidisstore.New(context.Background(), rc, nil)
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

// commandUsec returns the microseconds INFO commandstats counts for the
// commands named (all commands when none are), since the last reset.
// Commands a script calls are counted under their own names too, inside
// their script's figure as well: name the top-level ones to count each
// microsecond once.
func commandUsec(tb testing.TB, c *redis.Client, names ...string) float64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var usec float64
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" || name == "cmdstat_config|resetstat" {
			continue
		}
		if len(names) > 0 && !slices.Contains(names, strings.TrimPrefix(name, "cmdstat_")) {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				f, _ := strconv.ParseFloat(v, 64)
				usec += f
			}
		}
	}
	return usec
}

func resetStats(tb testing.TB, c *redis.Client) {
	if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
		tb.Fatal(err)
	}
}

func init() {
	ctx := context.Background()
	const lease = 30 * time.Second
	setNX := func(c *redis.Client, key string) error { return c.SetNX(ctx, key, "1", lease).Err() }
	handle := func(tb testing.TB, rcv *dedup.Receiver[order, struct{}], id string) {
		if res, err := rcv.Handle(ctx, order{ID: id}); err != nil || res.Status != delivery.StatusProcessed {
			tb.Fatalf("status %v, %v", res.Status, err)
		}
	}
	register(row{
		name: "new message on Redis, sequential",
		unit: "ns/op", n: 3000, chunk: 100, cpu: true,
		setup: func(tb testing.TB) []side {
			c := startRedis(tb)
			rcv := newRedisReceiver(tb, c)
			rrcv := newRueidisReceiver(tb, c)
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
				{name: "dedup Handle, rueidisstore", run: func(tb testing.TB, n int) sample {
					keys := ids(runPrefix("rueidis"), n)
					return timed(n, func(i int) { handle(tb, rrcv, keys[i]) })
				}},
			}
		},
		versus: []versus{{name: "rueidisstore over redisstore (time per message: below 1 is faster)", a: 2, b: 1}},
	}, row{
		name: "new messages on Redis, 16 goroutines",
		unit: "msgs/s", n: 10000,
		setup: func(tb testing.TB) []side {
			c := startRedis(tb)
			rcv := newRedisReceiver(tb, c)
			rrcv := newRueidisReceiver(tb, c)
			return []side{
				{name: "SET NX + SET", run: func(tb testing.TB, n int) sample {
					keys := ids(runPrefix("setnxset"), n)
					return rate(n, func() {
						parallel(n, 16, func(i int) {
							setNXSet(tb, c, keys[i])
						})
					})
				}},
				{name: "dedup Handle, redisstore", run: func(tb testing.TB, n int) sample {
					keys := ids(runPrefix("dedup"), n)
					return rate(n, func() { parallel(n, 16, func(i int) { handle(tb, rcv, keys[i]) }) })
				}},
				{name: "dedup Handle, rueidisstore", run: func(tb testing.TB, n int) sample {
					keys := ids(runPrefix("rueidis"), n)
					return rate(n, func() { parallel(n, 16, func(i int) { handle(tb, rrcv, keys[i]) }) })
				}},
			}
		},
		versus: []versus{{name: "rueidisstore over redisstore", a: 2, b: 1}},
	}, row{
		name: "HandleBatch(100) on Redis",
		unit: "msgs/s", n: 20000,
		setup: func(tb testing.TB) []side {
			c := startRedis(tb)
			rcv := newRedisReceiver(tb, c)
			rrcv := newRueidisReceiver(tb, c)
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
					return rate(n, func() { handleBatches(tb, rcv, ids(runPrefix("batch"), n), size) })
				}},
				{name: "dedup HandleBatch(100), rueidisstore", run: func(tb testing.TB, n int) sample {
					return rate(n, func() { handleBatches(tb, rrcv, ids(runPrefix("rbatch"), n), size) })
				}},
			}
		},
		versus: []versus{{name: "rueidisstore over redisstore", a: 2, b: 1}},
	}, commandTimeRow("Redis command time per new message", 1), commandTimeRow("Redis command time per new message, 16 goroutines", 16),
		cpuRow("Redis CPU per new message (server user + sys)", 1), cpuRow("Redis CPU per new message (server user + sys), 16 goroutines", 16))
}

// commandTimeRow measures the time Redis spends executing the commands of
// a new message (INFO commandstats), sent by workers goroutines at once:
// one at a time, a command meets a server whose caches went cold while it
// waited, and its usec counts that; from 16 goroutines, as a busy consumer
// sends, the server stays warm. It counts execution only: not reading the
// requests, parsing them or writing the replies, which cpuRow counts.
func commandTimeRow(name string, workers int) row {
	ctx := context.Background()
	const lease = 30 * time.Second
	return row{
		name: name,
		unit: "µs", n: 3000,
		setup: func(tb testing.TB) []side {
			c := startRedis(tb)
			st, err := redisstore.New(ctx, c, nil)
			if err != nil {
				tb.Fatal(err)
			}
			return []side{
				{name: "SET NX + SET", run: func(tb testing.TB, n int) sample {
					keys := ids(runPrefix("cpu-set"), n)
					resetStats(tb, c)
					parallel(n, workers, func(i int) { setNXSet(tb, c, keys[i]) })
					return sample{value: commandUsec(tb, c) / float64(n)}
				}},
				{name: "dedup: redisstore Acquire + Complete, what Handle sends", run: func(tb testing.TB, n int) sample {
					// Two phases, so that the commands the completion
					// script calls (GET, SET, TIME) are counted once, in
					// EVALSHA's figure, and never again beside the claims'
					// own SET.
					keys := ids(runPrefix("cpu-dedup"), n)
					tokens := make([]store.Token, n)
					resetStats(tb, c)
					parallel(n, workers, func(i int) {
						cl, err := st.Acquire(ctx, store.AcquireRequest{Key: keys[i], Lease: lease})
						if err != nil || !cl.Acquired {
							tb.Errorf("acquire %s: %v, %+v", keys[i], err, cl)
							return
						}
						tokens[i] = cl.Token
					})
					claims := commandUsec(tb, c)
					resetStats(tb, c)
					parallel(n, workers, func(i int) {
						if err := st.Complete(ctx, store.CompleteRequest{Key: keys[i], Token: tokens[i], Retention: 24 * time.Hour}); err != nil {
							tb.Error(err)
						}
					})
					completions := commandUsec(tb, c, "evalsha", "eval")
					return sample{value: (claims + completions) / float64(n)}
				}},
			}
		},
	}
}

// setNXSet is the floor of a new message on Redis: a claim (SET NX with a
// lease), then the completion (a SET with the retention). It fails tb
// unless the claim found the key absent.
func setNXSet(tb testing.TB, c *redis.Client, key string) {
	ctx := context.Background()
	set, err := c.SetNX(ctx, key, "1", 30*time.Second).Result()
	if err != nil || !set {
		tb.Errorf("SET NX %s: set %v, %v", key, set, err)
		return
	}
	if err := c.Set(ctx, key, "done", 24*time.Hour).Err(); err != nil {
		tb.Error(err)
	}
}

// serverCPU returns the CPU time the Redis server process has used, user
// and system (INFO cpu: getrusage of the process, every thread).
func serverCPU(tb testing.TB, c *redis.Client) time.Duration {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var seconds float64
	found := 0
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "used_cpu_user" && name != "used_cpu_sys") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			tb.Fatalf("INFO cpu: %s: %v", line, err)
		}
		seconds += f
		found++
	}
	if found != 2 {
		tb.Fatalf("INFO cpu has no used_cpu_user and used_cpu_sys: %q", info)
	}
	return time.Duration(seconds * float64(time.Second))
}

// cpuRow measures the CPU the Redis server process spends on a new message,
// user and system time of all its threads (INFO cpu before and after), sent
// by workers goroutines at once: what commandTimeRow counts plus reading,
// parsing and answering the requests (the system calls of the loopback
// connections), its event loop's wake-ups, and its periodic tasks (about
// ten a second, which a longer run pays more of).
func cpuRow(name string, workers int) row {
	ctx := context.Background()
	return row{
		name: name,
		unit: "µs", n: 3000,
		setup: func(tb testing.TB) []side {
			c := startRedis(tb)
			rcv := newRedisReceiver(tb, c)
			perMessage := func(tb testing.TB, n int, send func()) sample {
				before := serverCPU(tb, c)
				send()
				used := serverCPU(tb, c) - before
				return sample{value: float64(used.Nanoseconds()) / 1e3 / float64(n)}
			}
			return []side{
				{name: "SET NX + SET", run: func(tb testing.TB, n int) sample {
					keys := ids(runPrefix("cpu-set"), n)
					return perMessage(tb, n, func() { parallel(n, workers, func(i int) { setNXSet(tb, c, keys[i]) }) })
				}},
				{name: "dedup Handle, redisstore", run: func(tb testing.TB, n int) sample {
					keys := ids(runPrefix("cpu-dedup"), n)
					return perMessage(tb, n, func() {
						parallel(n, workers, func(i int) {
							if res, err := rcv.Handle(ctx, order{ID: keys[i]}); err != nil || res.Status != delivery.StatusProcessed {
								tb.Errorf("%s: status %v, %v", keys[i], res.Status, err)
							}
						})
					})
				}},
			}
		},
	}
}

// handleBatches hands keys to rcv in batches of size, failing tb unless
// every message is processed.
func handleBatches(tb testing.TB, rcv *dedup.Receiver[order, struct{}], keys []string, size int) {
	msgs := make([]order, size)
	for lo := 0; lo < len(keys); lo += size {
		batch := msgs[:min(size, len(keys)-lo)]
		for i := range batch {
			batch[i] = order{ID: keys[lo+i]}
		}
		for _, out := range rcv.HandleBatch(context.Background(), batch) {
			if out.Err != nil || out.Result.Status != delivery.StatusProcessed {
				tb.Fatalf("status %v, %v", out.Result.Status, out.Err)
			}
		}
	}
}
