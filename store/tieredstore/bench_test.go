package tieredstore_test

import (
	"context"
	"testing"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store/memstore"
	"github.com/dedup-go/dedup/store/redisstore"
)

// BenchmarkDuplicate: a duplicate of a completed message answered by the
// tiered store's local tier (over Redis), beside the same duplicate
// answered by memstore (the baseline) and by redisstore alone (a round
// trip).
//
//	go test -run '^$' -bench Duplicate -benchmem -count 5 ./store/tieredstore
func BenchmarkDuplicate(b *testing.B) {
	c := redistest.Client(b)
	bench := func(b *testing.B, store dedup.Store) {
		rcv, err := dedup.NewReceiver(store, func(id string) (string, error) { return id, nil },
			func(context.Context, string) (struct{}, error) { return struct{}{}, nil },
			&dedup.Config{Namespace: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		if _, err := rcv.Handle(ctx, "order-1"); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if res, err := rcv.Handle(ctx, "order-1"); err != nil || res.Status != dedup.StatusDuplicate {
				b.Fatal(res.Status, err)
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
	b.Run("redisstore", func(b *testing.B) {
		s, err := redisstore.New(context.Background(), c, &redisstore.Options{Prefix: redistest.Prefix(b, c)})
		if err != nil {
			b.Fatal(err)
		}
		bench(b, s)
	})
}
