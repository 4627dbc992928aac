package dedup_test

import (
	"context"
	"runtime/metrics"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
)

// The benchmarks of one run compare Handle with its baseline, the bare
// handler call:
//
//	go test -run '^$' -bench . -benchmem .
func BenchmarkHandle(b *testing.B) {
	ctx := context.Background()
	empty := func(ctx context.Context, o order) (struct{}, error) { return struct{}{}, nil }
	small := func(ctx context.Context, o order) (receipt, error) { return receipt{OrderID: o.ID, Charge: 1999}, nil }

	b.Run("baseline=bare-handler", func(b *testing.B) {
		b.ReportAllocs()
		o := order{ID: "o-1"}
		for b.Loop() {
			_, _ = empty(ctx, o)
		}
	})
	b.Run("baseline=store-acquire-complete", func(b *testing.B) {
		st := newMemstore(b, clock.Real())
		ids := makeIDs(b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			key := "default:" + ids[i]
			c, err := st.Acquire(ctx, store.AcquireRequest{Key: key, Lease: (30 * time.Second)})
			if err != nil {
				b.Fatal(err)
			}
			if err := st.Complete(ctx, store.CompleteRequest{Key: key, Token: c.Token, Retention: (24 * time.Hour)}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("new-key/empty-result", func(b *testing.B) {
		rcv := newReceiver(b, newMemstore(b, clock.Real()), empty, nil)
		ids := makeIDs(b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if _, err := rcv.Handle(ctx, order{ID: ids[i]}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("duplicate/empty-result", func(b *testing.B) {
		rcv := newReceiver(b, newMemstore(b, clock.Real()), empty, nil)
		o := order{ID: "o-1"}
		if _, err := rcv.Handle(ctx, o); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			res, _ := rcv.Handle(ctx, o)
			if res.Status != delivery.StatusDuplicate {
				b.Fatal(res.Status)
			}
		}
	})
	b.Run("duplicate/small-json-result", func(b *testing.B) {
		rcv := newReceiver(b, newMemstore(b, clock.Real()), small, nil)
		o := order{ID: "o-1"}
		if _, err := rcv.Handle(ctx, o); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			res, _ := rcv.Handle(ctx, o)
			if res.Status != delivery.StatusDuplicate {
				b.Fatal(res.Status)
			}
		}
	})
	// Eight goroutines on new keys, as an adapter's workers: the store's
	// own Acquire and Complete beside Handle.
	b.Run("baseline=store-acquire-complete/parallel", func(b *testing.B) {
		st := newMemstore(b, clock.Real())
		var n atomic.Int64
		b.SetParallelism(4)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				key := "default:" + strconv.FormatInt(n.Add(1), 10)
				c, err := st.Acquire(ctx, store.AcquireRequest{Key: key, Lease: (30 * time.Second)})
				if err != nil {
					b.Error(err)
					return
				}
				if err := st.Complete(ctx, store.CompleteRequest{Key: key, Token: c.Token, Retention: (24 * time.Hour)}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("new-key/parallel/empty-result", func(b *testing.B) {
		rcv := newReceiver(b, newMemstore(b, clock.Real()), empty, nil)
		var n atomic.Int64
		b.SetParallelism(4)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := rcv.Handle(ctx, order{ID: strconv.FormatInt(n.Add(1), 10)}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("duplicate/parallel/empty-result", func(b *testing.B) {
		rcv := newReceiver(b, newMemstore(b, clock.Real()), empty, nil)
		o := order{ID: "o-1"}
		if _, err := rcv.Handle(ctx, o); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_, _ = rcv.Handle(ctx, o)
			}
		})
	})
}

// BenchmarkNewKey pairs a new message through Handle with what it costs
// memstore alone, as the bench module's table does: each side takes b.N
// fresh keys, made before the clock starts, into a store of its own with
// the default capacity. Run each side the same number of times and compare
// them run by run (the i-th run of one with the i-th of the other):
//
//	go test -run '^$' -bench 'BenchmarkNewKey$' -benchtime 100000x -count 10 -benchmem .
//
// gc-% is the share of the run's CPU time that the runtime estimates the
// garbage collector took.
func BenchmarkNewKey(b *testing.B) {
	ctx := context.Background()
	b.Run("baseline=memstore-acquire-complete", func(b *testing.B) {
		st := newMemstore(b, clock.Real())
		keys := makeKeys("default:o-", b.N)
		b.ReportAllocs()
		b.ResetTimer()
		defer reportGC(b)()
		for i := range b.N {
			c, err := st.Acquire(ctx, store.AcquireRequest{Key: keys[i], Lease: (30 * time.Second)})
			if err != nil || !c.Acquired {
				b.Fatal(c.Acquired, err)
			}
			if err := st.Complete(ctx, store.CompleteRequest{Key: keys[i], Token: c.Token, Retention: (24 * time.Hour)}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("handle", func(b *testing.B) {
		rcv := newReceiver(b, newMemstore(b, clock.Real()), func(context.Context, order) (struct{}, error) { return struct{}{}, nil }, nil)
		ids := makeKeys("o-", b.N)
		b.ReportAllocs()
		b.ResetTimer()
		defer reportGC(b)()
		for i := range b.N {
			if res, err := rcv.Handle(ctx, order{ID: ids[i]}); err != nil || res.Status != delivery.StatusProcessed {
				b.Fatal(res.Status, err)
			}
		}
	})
}

// reportGC reads the runtime's CPU estimates now, and returns what reports,
// as gc-%, the collector's share of them since.
func reportGC(b *testing.B) func() {
	samples := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/cpu/classes/total:cpu-seconds"}}
	metrics.Read(samples)
	gc, total := samples[0].Value.Float64(), samples[1].Value.Float64()
	return func() {
		metrics.Read(samples)
		if d := samples[1].Value.Float64() - total; d > 0 {
			b.ReportMetric(100*(samples[0].Value.Float64()-gc)/d, "gc-%")
		}
	}
}

// BenchmarkHandleBatch: 100 new messages per HandleBatch call against
// memstore, beside 100 Handle calls.
func BenchmarkHandleBatch(b *testing.B) {
	ctx := context.Background()
	h := func(ctx context.Context, o order) (struct{}, error) { return struct{}{}, nil }
	const size = 100
	for _, mode := range []string{"handle-x100", "handle-batch-100"} {
		b.Run(mode, func(b *testing.B) {
			rcv := newReceiver(b, newMemstore(b, clock.Real()), h, nil)
			msgs := make([]order, size)
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				for i := range msgs {
					n++
					msgs[i] = order{ID: strconv.Itoa(n)}
				}
				if mode == "handle-batch-100" {
					rcv.HandleBatch(ctx, msgs)
				} else {
					for _, m := range msgs {
						_, _ = rcv.Handle(ctx, m)
					}
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

func makeIDs(n int) []string { return makeKeys("o-", n) }

// makeKeys returns n distinct strings with a prefix.
func makeKeys(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = prefix + strconv.Itoa(i)
	}
	return ids
}
