package dedup_test

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
)

// scalingRecords is how many distinct records each side of a round of
// BenchmarkScaling handles.
const scalingRecords = 100_000

// BenchmarkScaling measures, at 1, 4, 16 and 64 goroutines, Handle beside
// what it costs memstore alone, in the same run: each round (one b.N) times
// both sides over the same work, 100k distinct records each spread evenly
// over the goroutines, each side on a fresh store of the same
// configuration after an untimed collection.
//
//   - new: Handle of a new message against memstore's Acquire + Complete;
//   - dup: Handle of a completed message against memstore's Peek of it;
//   - dup-hot: the same, every delivery of one completed key (the bench
//     module's duplicate row).
//
// The metrics are each side's wall time per message and their ratio
// (handle/bare); the rounds are summed before dividing:
//
//	go test -run '^$' -bench 'BenchmarkScaling' -benchtime 3x -count 5 .
func BenchmarkScaling(b *testing.B) {
	ctx := context.Background()
	ids := makeKeys("o-", scalingRecords)
	keys := makeKeys("default:o-", scalingRecords)
	empty := func(context.Context, order) (struct{}, error) { return struct{}{}, nil }
	for _, g := range []int{1, 4, 16, 64} {
		b.Run("new/g="+strconv.Itoa(g), func(b *testing.B) {
			var bare, handle time.Duration
			for range b.N {
				st := newMemstore(b, clock.Real())
				bare += spread(b, g, func(i int) {
					c, err := st.Acquire(ctx, store.AcquireRequest{Key: keys[i], Lease: 30 * time.Second})
					if err != nil || !c.Acquired {
						b.Error(c.Acquired, err)
						return
					}
					if err := st.Complete(ctx, store.CompleteRequest{Key: keys[i], Token: c.Token, Retention: 24 * time.Hour}); err != nil {
						b.Error(err)
					}
				})
				rcv := newReceiver(b, newMemstore(b, clock.Real()), empty, nil)
				handle += spread(b, g, func(i int) {
					if res, err := rcv.Handle(ctx, order{ID: ids[i]}); err != nil || res.Status != delivery.StatusProcessed {
						b.Error(res.Status, err)
					}
				})
			}
			reportSides(b, bare, handle)
		})
	}
	for _, g := range []int{1, 4, 16, 64} {
		b.Run("dup/g="+strconv.Itoa(g), func(b *testing.B) {
			st := newMemstore(b, clock.Real())
			rcv := newReceiver(b, st, empty, nil)
			spread(b, 1, func(i int) { _, _ = rcv.Handle(ctx, order{ID: ids[i]}) })
			var bare, handle time.Duration
			for range b.N {
				bare += spread(b, g, func(i int) {
					if st.Peek("default:", ids[i]) == nil {
						b.Error("Peek found nothing")
					}
				})
				handle += spread(b, g, func(i int) {
					if res, err := rcv.Handle(ctx, order{ID: ids[i]}); err != nil || res.Status != delivery.StatusDuplicate {
						b.Error(res.Status, err)
					}
				})
			}
			reportSides(b, bare, handle)
		})
	}
	for _, g := range []int{1, 4, 16, 64} {
		b.Run("dup-hot/g="+strconv.Itoa(g), func(b *testing.B) {
			st := newMemstore(b, clock.Real())
			rcv := newReceiver(b, st, empty, nil)
			o := order{ID: ids[0]}
			_, _ = rcv.Handle(ctx, o)
			var bare, handle time.Duration
			for range b.N {
				bare += spread(b, g, func(int) {
					if st.Peek("default:", o.ID) == nil {
						b.Error("Peek found nothing")
					}
				})
				handle += spread(b, g, func(int) {
					if res, err := rcv.Handle(ctx, o); err != nil || res.Status != delivery.StatusDuplicate {
						b.Error(res.Status, err)
					}
				})
			}
			reportSides(b, bare, handle)
		})
	}
}

// spread runs do for each of the scalingRecords indexes, split into g
// contiguous ranges run by g goroutines, after an untimed collection, and
// returns the wall time from the start of the first to the end of the last.
func spread(b *testing.B, g int, do func(i int)) time.Duration {
	b.StopTimer()
	runtime.GC()
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	per := scalingRecords / g
	for w := range g {
		lo, hi := w*per, (w+1)*per
		if w == g-1 {
			hi = scalingRecords
		}
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			for i := lo; i < hi; i++ {
				do(i)
			}
		}()
	}
	ready.Wait()
	b.StartTimer()
	t := time.Now()
	close(start)
	done.Wait()
	d := time.Since(t)
	b.StopTimer()
	return d
}

// reportSides reports each side's time per message and their ratio.
func reportSides(b *testing.B, bare, handle time.Duration) {
	n := float64(b.N * scalingRecords)
	b.ReportMetric(float64(bare.Nanoseconds())/n, "bare-ns/msg")
	b.ReportMetric(float64(handle.Nanoseconds())/n, "handle-ns/msg")
	b.ReportMetric(float64(handle)/float64(bare), "ratio")
	b.ReportMetric(0, "ns/op")
}
