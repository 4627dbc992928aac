package redisstore_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store"
)

// The benchmarks run against the shared Redis, each beside its baseline: a
// raw SET NX, the cheapest round trip that could claim a key at all.
//
//	go test -run '^$' -bench . -benchmem -count 5 ./store/redisstore

func benchReceiver(b *testing.B) (*redis.Client, *dedup.Receiver[string, struct{}]) {
	c := redistest.Client(b)
	store := newStore(b, c, nil)
	rcv, err := dedup.NewReceiver(store, func(id string) (string, error) { return id, nil },
		func(context.Context, string) (struct{}, error) { return struct{}{}, nil },
		&dedup.Config{Namespace: "bench", Retention: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	return c, rcv
}

// ids returns n distinct message ids, made before the timer starts.
func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}

// BenchmarkNewMessage: a new message through the store alone (Acquire,
// Complete: two script round trips) and through Handle (claim, run,
// complete), against one SET NX round trip.
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
	b.Run("Acquire+Complete", func(b *testing.B) {
		s := newStore(b, redistest.Client(b), nil)
		keys := ids(b.N)
		ctx := context.Background()
		b.ResetTimer()
		for i := range b.N {
			c, err := s.Acquire(ctx, store.AcquireRequest{Key: keys[i], Lease: time.Minute})
			if err != nil || !c.Acquired {
				b.Fatal(c, err)
			}
			if err := s.Complete(ctx, store.CompleteRequest{Key: keys[i], Token: c.Token, Retention: time.Minute}); err != nil {
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
			if res, err := rcv.Handle(ctx, keys[i]); err != nil || res.Status != dedup.StatusProcessed {
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
	b.Run("Handle", func(b *testing.B) {
		_, rcv := benchReceiver(b)
		parallel(b, func(ctx context.Context, key string) error {
			_, err := rcv.Handle(ctx, key)
			return err
		})
	})
}

// BenchmarkHandleBatch: batches of 100 new messages, one pipelined round
// trip per phase, beside 100 Handle calls.
func BenchmarkHandleBatch(b *testing.B) {
	const size = 100
	b.Run("baseline=Handle×100", func(b *testing.B) {
		_, rcv := benchReceiver(b)
		keys := ids(b.N * size)
		ctx := context.Background()
		b.ResetTimer()
		start := time.Now()
		for i := range b.N * size {
			if _, err := rcv.Handle(ctx, keys[i]); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*size)/time.Since(start).Seconds(), "msgs/s")
	})
	b.Run("HandleBatch100", func(b *testing.B) {
		_, rcv := benchReceiver(b)
		keys := ids(b.N * size)
		ctx := context.Background()
		b.ResetTimer()
		start := time.Now()
		for i := range b.N {
			for _, o := range rcv.HandleBatch(ctx, keys[i*size:(i+1)*size]) {
				if o.Err != nil || o.Result.Status != dedup.StatusProcessed {
					b.Fatal(o.Result.Status, o.Err)
				}
			}
		}
		b.ReportMetric(float64(b.N*size)/time.Since(start).Seconds(), "msgs/s")
	})
}
