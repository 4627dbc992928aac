package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/dedup-go/dedup"
)

func BenchmarkProbe(b *testing.B) {
	ctx := context.Background()
	b.Run("PING", func(b *testing.B) {
		c := sharedClient(b)
		for range b.N {
			c.Ping(ctx)
		}
	})
	b.Run("EVAL-return1", func(b *testing.B) {
		c := sharedClient(b)
		for range b.N {
			c.Eval(ctx, "return 1", []string{"x"})
		}
	})
	b.Run("Acquire", func(b *testing.B) {
		c := sharedClient(b)
		s := newStore(b, c, nil)
		keys := ids(b.N)
		b.ResetTimer()
		for i := range b.N {
			if _, err := s.Acquire(ctx, keys[i], dedup.AcquireRequest{Lease: time.Second}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AcquireComplete", func(b *testing.B) {
		c := sharedClient(b)
		s := newStore(b, c, nil)
		keys := ids(b.N)
		b.ResetTimer()
		for i := range b.N {
			cl, err := s.Acquire(ctx, keys[i], dedup.AcquireRequest{Lease: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Complete(ctx, keys[i], cl.Token, nil, time.Minute); err != nil {
				b.Fatal(err)
			}
		}
	})
}
