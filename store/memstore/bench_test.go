package memstore_test

import (
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
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

// BenchmarkAcquireCompleteParallel is BenchmarkAcquireComplete from
// GOMAXPROCS goroutines at once, each with keys of its own: what the
// shards' mutexes and the store-wide counts of Capacity cost when every
// core settles records.
func BenchmarkAcquireCompleteParallel(b *testing.B) {
	s, _ := setup(b, 0)
	result := []byte(`{"ok":true}`)
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		prefix := "billing:" + strconv.FormatInt(next.Add(1), 10) + "-"
		keys := make([]string, 1<<16)
		for i := range keys {
			keys[i] = prefix + strconv.Itoa(i)
		}
		i := 0
		for pb.Next() {
			key := keys[i%len(keys)]
			i++
			c, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: lease})
			if err != nil {
				b.Error(err)
				return
			}
			if !c.Acquired {
				continue
			}
			if err := s.Complete(ctx, store.CompleteRequest{Key: key, Token: c.Token, Result: result, Retention: retention}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRetainedHeap measures the heap a completed record holds while
// it is retained: n records of keys "billing:<i>" made for the store as
// the receiver makes them, each with a small JSON result, the heap read
// after a collection before and after. Beside it, the same keys in a bare
// map[string]struct{}: the least a set of keys holds.
func BenchmarkRetainedHeap(b *testing.B) {
	const n = 100_000
	result := []byte(`{"ok":true}`)
	b.Run("memstore", func(b *testing.B) {
		var perRecord float64
		for b.Loop() {
			perRecord = heapPer(n, func() any {
				s, err := memstore.New(&memstore.Options{Capacity: n})
				if err != nil {
					b.Fatal(err)
				}
				for i := range n {
					key := "billing:" + strconv.Itoa(i)
					c, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: lease})
					if err != nil || !c.Acquired {
						b.Fatalf("Acquire(%q): %v, acquired %v", key, err, c.Acquired)
					}
					if err := s.Complete(ctx, store.CompleteRequest{Key: key, Token: c.Token, Result: result, Retention: retention}); err != nil {
						b.Fatal(err)
					}
				}
				if got := s.Stats().Len; got != n {
					b.Fatalf("the store kept %d of %d records", got, n)
				}
				return s
			})
		}
		b.ReportMetric(perRecord, "B/record")
	})
	b.Run("baseline=map[string]struct{}", func(b *testing.B) {
		var perRecord float64
		for b.Loop() {
			perRecord = heapPer(n, func() any {
				m := make(map[string]struct{})
				for i := range n {
					m["billing:"+strconv.Itoa(i)] = struct{}{}
				}
				return m
			})
		}
		b.ReportMetric(perRecord, "B/record")
	})
}

// heapPer returns the heap that what fill returns holds, per one of n
// records.
func heapPer(n int, fill func() any) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	kept := fill()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(kept)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}
