package memstore_test

import (
	"strconv"
	"sync"
	"testing"

	"github.com/dedup-go/dedup/store"
)

// BenchmarkPeek measures the answer to a duplicate of a completed message,
// against a bare map under a mutex: the least any locked lookup costs.
func BenchmarkPeek(b *testing.B) {
	b.Run("memstore", func(b *testing.B) {
		s, _ := setup(b, 0)
		c, err := s.Acquire(ctx, store.AcquireRequest{Key: "done", Lease: lease})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Complete(ctx, store.CompleteRequest{Key: "done", Token: c.Token, Result: []byte(`{"ok":true}`), Retention: retention}); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if s.Peek("", "done") == nil {
				b.Fatal("Peek missed")
			}
		}
	})
	b.Run("baseline=map+mutex", func(b *testing.B) {
		var mu sync.Mutex
		m := map[string]store.Record{"done": {Key: "done", State: store.StateCompleted}}
		b.ReportAllocs()
		for b.Loop() {
			mu.Lock()
			_, ok := m["done"]
			mu.Unlock()
			if !ok {
				b.Fatal("lookup missed")
			}
		}
	})
}

// BenchmarkAcquireComplete measures one message's way through the store:
// claim a new key, store its result. Keys are precomputed so the numbers are
// the store's alone, and the capacity is the default, so evictions are
// part of the steady state.
func BenchmarkAcquireComplete(b *testing.B) {
	keys := make([]string, 1<<20)
	for i := range keys {
		keys[i] = "billing:" + strconv.Itoa(i)
	}
	result := []byte(`{"ok":true}`)
	b.Run("memstore", func(b *testing.B) {
		s, _ := setup(b, 0)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			key := keys[i%len(keys)]
			i++
			c, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: lease})
			if err != nil {
				b.Fatal(err)
			}
			if !c.Acquired {
				// The key came round again within its retention: a replay.
				continue
			}
			if err := s.Complete(ctx, store.CompleteRequest{Key: key, Token: c.Token, Result: result, Retention: retention}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline=map+mutex", func(b *testing.B) {
		var mu sync.Mutex
		m := make(map[string][]byte)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			key := keys[i%len(keys)]
			i++
			mu.Lock()
			_, seen := m[key]
			mu.Unlock()
			if seen {
				continue
			}
			mu.Lock()
			m[key] = append([]byte(nil), result...)
			mu.Unlock()
		}
	})
}
