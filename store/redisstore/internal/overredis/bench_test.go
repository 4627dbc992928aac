package overredis_test

import (
	"context"
	"testing"
	"time"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
	"github.com/dedup-go/dedup/store/redisstore"
)

// BenchmarkDuplicate: a duplicate of a completed message, looked up the way
// a receiver looks it up (Peek, then Acquire when memory has nothing):
// answered by the tiered store's local tier (over Redis), beside memstore
// (the baseline: memory alone) and redisstore alone (a round trip).
//
//	go test -run '^$' -bench Duplicate -benchmem -count 5 ./store/tieredstore
func BenchmarkDuplicate(b *testing.B) {
	c := redistest.Client(b)
	bench := func(b *testing.B, s store.Store) {
		ctx := context.Background()
		first, err := s.Acquire(ctx, store.AcquireRequest{Key: "bench:order-1", Lease: time.Minute})
		if err != nil || !first.Acquired {
			b.Fatal(first, err)
		}
		if err := s.Complete(ctx, store.CompleteRequest{Key: "bench:order-1", Token: first.Token, Result: []byte("receipt"), Retention: time.Hour}); err != nil {
			b.Fatal(err)
		}
		peeker, _ := s.(store.Peeker)
		req := store.AcquireRequest{Key: "bench:order-1", Lease: time.Minute}
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if peeker != nil {
				if rec := peeker.Peek("bench:", "order-1"); rec != nil {
					continue
				}
			}
			if c, err := s.Acquire(ctx, req); err != nil || c.Record.State != store.StateCompleted {
				b.Fatal(c.Record.State, err)
			}
		}
	}
	b.Run("baseline=memstore", func(b *testing.B) {
		s, err := memstore.New(nil)
		if err != nil {
			b.Fatal(err)
		}
		bench(b, s)
	})
	b.Run("tieredstore", func(b *testing.B) {
		bench(b, overRedis(b, c, redistest.Prefix(b, c)))
	})
	b.Run("tieredstore-acquire", func(b *testing.B) {
		// Acquire alone, as a receiver without Peek would call it.
		bench(b, struct{ store.Store }{overRedis(b, c, redistest.Prefix(b, c))})
	})
	b.Run("redisstore", func(b *testing.B) {
		s, err := redisstore.New(context.Background(), c, &redisstore.Options{Prefix: redistest.Prefix(b, c)})
		if err != nil {
			b.Fatal(err)
		}
		bench(b, s)
	})
}
