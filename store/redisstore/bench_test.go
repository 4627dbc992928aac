package redisstore_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store"
)

// The benchmarks run each beside its baseline in the same run: the plain
// Redis commands that the same work needs at the least (a SET NX to claim a
// key, a SET to store its result). -count runs the sub-benchmarks of one
// benchmark in turn, so a baseline and what it is compared with are
// measured alternately on a shared machine; compare medians.
//
//	go test -run '^$' -bench . -benchtime 2000x -count 5 ./store/redisstore

func benchReceiver(b *testing.B) (*redis.Client, *dedup.Receiver[string, struct{}]) {
	c := redistest.Client(b)
	return c, receiverOn(b, newStore(b, c, nil))
}

func receiverOn(b *testing.B, s store.Store) *dedup.Receiver[string, struct{}] {
	rcv, err := dedup.NewReceiver(s, func(id string) (string, error) { return id, nil },
		func(context.Context, string) (struct{}, error) { return struct{}{}, nil },
		&dedup.Config{Namespace: "bench", Retention: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	return rcv
}

// ids returns n distinct message ids, made before the timer starts.
func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}

// newMessage runs one new message through the store alone: Acquire, then
// Complete with a small result.
func newMessage(ctx context.Context, s store.Store, key string) error {
	c, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
	if err != nil {
		return err
	}
	if !c.Acquired {
		return errNotAcquired
	}
	return s.Complete(ctx, store.CompleteRequest{Key: key, Token: c.Token, Result: []byte("ok"), Retention: time.Minute})
}

var errNotAcquired = errors.New("a new key was not acquired")

// BenchmarkNewMessage: a new message through the store alone (Acquire,
// Complete: two round trips) and through Handle (claim, run, complete),
// against one SET NX round trip and against SET NX then SET.
func BenchmarkNewMessage(b *testing.B) {
	b.Run("baseline=SETNX", func(b *testing.B) {
		c := redistest.Client(b)
		prefix := redistest.Prefix(b, c)
		keys := ids(b.N)
		ctx := context.Background()
		b.ResetTimer()
		for i := range b.N {
			if err := c.SetNX(ctx, prefix+keys[i], "1", time.Minute).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline=SETNX+SET", func(b *testing.B) {
		c := redistest.Client(b)
		prefix := redistest.Prefix(b, c)
		keys := ids(b.N)
		ctx := context.Background()
		b.ResetTimer()
		for i := range b.N {
			if err := c.SetNX(ctx, prefix+keys[i], "1", time.Minute).Err(); err != nil {
				b.Fatal(err)
			}
			if err := c.Set(ctx, prefix+keys[i], "ok", time.Minute).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Acquire+Complete", func(b *testing.B) {
		s := newStore(b, redistest.Client(b), nil)
		keys := ids(b.N)
		ctx := context.Background()
		b.ResetTimer()
		for i := range b.N {
			if err := newMessage(ctx, s, keys[i]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Handle", func(b *testing.B) {
		_, rcv := benchReceiver(b)
		keys := ids(b.N)
		ctx := context.Background()
		b.ResetTimer()
		for i := range b.N {
			if res, err := rcv.Handle(ctx, keys[i]); err != nil || res.Status != delivery.StatusProcessed {
				b.Fatal(res.Status, err)
			}
		}
	})
}

// BenchmarkNewMessageParallel: the same with 16 goroutines, as a consumer
// with 16 workers runs; msgs/s is the throughput of all of them.
func BenchmarkNewMessageParallel(b *testing.B) {
	const workers = 16
	parallel := func(b *testing.B, do func(ctx context.Context, key string) error) {
		keys := ids(b.N)
		var next atomic.Int64
		// RunParallel starts parallelism × GOMAXPROCS goroutines.
		b.SetParallelism(max(1, workers/runtime.GOMAXPROCS(0)))
		ctx := context.Background()
		b.ResetTimer()
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := do(ctx, keys[next.Add(1)-1]); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
	}
	b.Run("baseline=SETNX", func(b *testing.B) {
		c := redistest.Client(b)
		prefix := redistest.Prefix(b, c)
		parallel(b, func(ctx context.Context, key string) error {
			return c.SetNX(ctx, prefix+key, "1", time.Minute).Err()
		})
	})
	b.Run("baseline=SETNX+SET", func(b *testing.B) {
		c := redistest.Client(b)
		prefix := redistest.Prefix(b, c)
		parallel(b, func(ctx context.Context, key string) error {
			if err := c.SetNX(ctx, prefix+key, "1", time.Minute).Err(); err != nil {
				return err
			}
			return c.Set(ctx, prefix+key, "ok", time.Minute).Err()
		})
	})
	b.Run("Acquire+Complete", func(b *testing.B) {
		s := newStore(b, redistest.Client(b), nil)
		parallel(b, func(ctx context.Context, key string) error {
			return newMessage(ctx, s, key)
		})
	})
	b.Run("Handle", func(b *testing.B) {
		_, rcv := benchReceiver(b)
		parallel(b, func(ctx context.Context, key string) error {
			_, err := rcv.Handle(ctx, key)
			return err
		})
	})
}

// batchSize is the batch of the batch benchmarks, as HandleBatch(100).
const batchSize = 100

// batchNew claims and completes keys as one batch: AcquireBatch, then
// CompleteBatch, as HandleBatch does around its handler calls.
func batchNew(ctx context.Context, s store.BatchStore, keys []string) error {
	acq := make([]store.AcquireRequest, len(keys))
	for i, k := range keys {
		acq[i] = store.AcquireRequest{Key: k, Lease: time.Minute}
	}
	comp := make([]store.CompleteRequest, 0, len(keys))
	for i, o := range s.AcquireBatch(ctx, acq) {
		if o.Err != nil {
			return o.Err
		}
		if !o.Claim.Acquired {
			return errNotAcquired
		}
		comp = append(comp, store.CompleteRequest{Key: keys[i], Token: o.Claim.Token, Result: []byte("ok"), Retention: time.Minute})
	}
	for _, err := range s.CompleteBatch(ctx, comp) {
		if err != nil {
			return err
		}
	}
	return nil
}

// pipelineNew is the baseline of a batch: a pipeline of a SET NX per key,
// then a pipeline of a SET per key (two round trips, as a batch's claim
// and completion are).
func pipelineNew(ctx context.Context, c redis.UniversalClient, keys []string) error {
	for _, nx := range []bool{true, false} {
		pipe := c.Pipeline()
		for _, k := range keys {
			if nx {
				pipe.SetNX(ctx, k, "1", time.Minute)
			} else {
				pipe.Set(ctx, k, "ok", time.Minute)
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkBatch: batches of 100 new messages, one pipelined round trip
// per phase, beside two pipelines of 100 plain commands; msgs/s counts
// messages, not batches.
func BenchmarkBatch(b *testing.B) {
	batches := func(b *testing.B, do func(ctx context.Context, keys []string) error) {
		keys := ids(b.N * batchSize)
		ctx := context.Background()
		b.ResetTimer()
		start := time.Now()
		for i := range b.N {
			if err := do(ctx, keys[i*batchSize:(i+1)*batchSize]); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*batchSize)/time.Since(start).Seconds(), "msgs/s")
	}
	b.Run("baseline=pipeline(SETNX)+pipeline(SET)", func(b *testing.B) {
		c := redistest.Client(b)
		prefix := redistest.Prefix(b, c)
		batches(b, func(ctx context.Context, keys []string) error {
			full := make([]string, len(keys))
			for i, k := range keys {
				full[i] = prefix + k
			}
			return pipelineNew(ctx, c, full)
		})
	})
	b.Run("AcquireBatch+CompleteBatch", func(b *testing.B) {
		s := newStore(b, redistest.Client(b), nil)
		batches(b, func(ctx context.Context, keys []string) error { return batchNew(ctx, s, keys) })
	})
	b.Run("HandleBatch", func(b *testing.B) {
		_, rcv := benchReceiver(b)
		batches(b, func(ctx context.Context, keys []string) error {
			for _, o := range rcv.HandleBatch(ctx, keys) {
				if o.Err != nil || o.Result.Status != delivery.StatusProcessed {
					return o.Err
				}
			}
			return nil
		})
	})
}

// BenchmarkRedisCPU: the CPU Redis spends per new message, on a
// redis-server of the benchmark's own (its statistics are reset, which the
// shared one's must not be). redis-µs/msg sums, over the commands a new
// message sends, the usec of INFO commandstats: the claims are sent first
// and their statistics read, then, after CONFIG RESETSTAT, the
// completions, so that the commands a script calls (which commandstats
// counts again under their own names) are counted once, in the script's.
// claim-µs/msg and complete-µs/msg are its two parts.
// cpu-µs/msg is the server's whole CPU time (INFO cpu, user plus system:
// parsing and replies included) over both phases.
func BenchmarkRedisCPU(b *testing.B) {
	srv := redistest.StartServer(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()

	// measure runs claim then complete for b.N messages and reports the
	// server's CPU per message.
	measure := func(b *testing.B, claim, complete func(keys []string) error) {
		keys := ids(b.N)
		b.ResetTimer()
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		cpu0 := serverCPU(b, c)
		if err := claim(keys); err != nil {
			b.Fatal(err)
		}
		claimUsec := topLevelUsec(b, c)
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		if err := complete(keys); err != nil {
			b.Fatal(err)
		}
		completeUsec := topLevelUsec(b, c)
		cpu := serverCPU(b, c) - cpu0
		b.ReportMetric(claimUsec/float64(b.N), "claim-µs/msg")
		b.ReportMetric(completeUsec/float64(b.N), "complete-µs/msg")
		b.ReportMetric((claimUsec+completeUsec)/float64(b.N), "redis-µs/msg")
		b.ReportMetric(cpu*1e6/float64(b.N), "cpu-µs/msg")
	}
	b.Run("baseline=SETNX+SET", func(b *testing.B) {
		prefix := redistest.Prefix(b, c)
		measure(b, func(keys []string) error {
			for _, k := range keys {
				if err := c.SetNX(ctx, prefix+k, "1", time.Minute).Err(); err != nil {
					return err
				}
			}
			return nil
		}, func(keys []string) error {
			for _, k := range keys {
				if err := c.Set(ctx, prefix+k, "ok", time.Minute).Err(); err != nil {
					return err
				}
			}
			return nil
		})
	})
	storeCPU := func(b *testing.B, size int) {
		s := newStore(b, c, nil)
		var tokens []store.Token
		measure(b, func(keys []string) error {
			tokens = make([]store.Token, len(keys))
			for i := 0; i < len(keys); i += size {
				reqs := make([]store.AcquireRequest, 0, size)
				for _, k := range keys[i:min(i+size, len(keys))] {
					reqs = append(reqs, store.AcquireRequest{Key: k, Lease: time.Minute})
				}
				var outs []store.AcquireOutcome
				if size == 1 {
					cl, err := s.Acquire(ctx, reqs[0])
					outs = []store.AcquireOutcome{{Claim: cl, Err: err}}
				} else {
					outs = s.AcquireBatch(ctx, reqs)
				}
				for j, o := range outs {
					if o.Err != nil {
						return o.Err
					}
					tokens[i+j] = o.Claim.Token
				}
			}
			return nil
		}, func(keys []string) error {
			for i := 0; i < len(keys); i += size {
				reqs := make([]store.CompleteRequest, 0, size)
				for j, k := range keys[i:min(i+size, len(keys))] {
					reqs = append(reqs, store.CompleteRequest{Key: k, Token: tokens[i+j], Result: []byte("ok"), Retention: time.Minute})
				}
				if size == 1 {
					if err := s.Complete(ctx, reqs[0]); err != nil {
						return err
					}
					continue
				}
				for _, err := range s.CompleteBatch(ctx, reqs) {
					if err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	b.Run("Acquire+Complete", func(b *testing.B) { storeCPU(b, 1) })
	b.Run("AcquireBatch+CompleteBatch", func(b *testing.B) { storeCPU(b, batchSize) })
}

// topLevelUsec sums the usec of INFO commandstats over the commands a
// client sent: the scripts' when any ran (what they call is inside theirs),
// every command's otherwise. CONFIG and INFO, the benchmark's own, are left
// out, and so is the connection's set-up (HELLO, CLIENT).
func topLevelUsec(b *testing.B, c *redis.Client) float64 {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	scripts, all := 0.0, 0.0
	for line := range strings.Lines(info) {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found || strings.HasPrefix(name, "config") || strings.HasPrefix(name, "client") || name == "info" || name == "hello" {
			continue
		}
		var usec float64
		for kv := range strings.SplitSeq(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				usec, _ = strconv.ParseFloat(v, 64)
			}
		}
		all += usec
		if strings.HasPrefix(name, "eval") || strings.HasPrefix(name, "fcall") {
			scripts += usec
		}
	}
	if scripts > 0 {
		return scripts
	}
	return all
}

// serverCPU reads the server's CPU time so far, user plus system, in
// seconds.
func serverCPU(b *testing.B, c *redis.Client) float64 {
	b.Helper()
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	total := 0.0
	for line := range strings.Lines(info) {
		name, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if name == "used_cpu_user" || name == "used_cpu_sys" {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return total
}
