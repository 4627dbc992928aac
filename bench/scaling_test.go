package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
)

// scalingGoroutines are the goroutine counts of the scaling row, those of
// the root module's BenchmarkScaling.
var scalingGoroutines = []int{1, 4, 16, 64}

// The scaling rows: a new message through Handle beside memstore's own
// Acquire + Complete at 1, 4, 16 and 64 goroutines, a row each, 100k
// records a side split evenly over the goroutines: the root module's
// BenchmarkScaling (new/g=N), in the table.
func init() {
	ctx := context.Background()
	for _, g := range scalingGoroutines {
		register(row{
			name: scalingRow(g),
			unit: "ns/op", n: 100_000,
			setup: func(testing.TB) []side {
				return []side{
					{name: "memstore Acquire + Complete", run: func(tb testing.TB, n int) sample {
						st, err := memstore.New(nil)
						if err != nil {
							tb.Fatal(err)
						}
						keys := ids("default:o-", n)
						return spread(n, g, func(i int) {
							c, err := st.Acquire(ctx, store.AcquireRequest{Key: keys[i], Lease: 30 * time.Second})
							if err != nil || !c.Acquired {
								tb.Errorf("acquire %s: %v, %+v", keys[i], err, c)
								return
							}
							if err := st.Complete(ctx, store.CompleteRequest{Key: keys[i], Token: c.Token, Retention: 24 * time.Hour}); err != nil {
								tb.Error(err)
							}
						})
					}},
					{name: "dedup Handle", run: func(tb testing.TB, n int) sample {
						rcv := newMemReceiver(tb)
						keys := ids("o-", n)
						return spread(n, g, func(i int) {
							if res, err := rcv.Handle(ctx, order{ID: keys[i]}); err != nil || res.Status != delivery.StatusProcessed {
								tb.Errorf("status %v, %v", res.Status, err)
							}
						})
					}},
				}
			},
		})
	}
}

// scalingRow is the name of the scaling row of g goroutines.
func scalingRow(g int) string {
	if g == 1 {
		return "new message, memstore, through Handle, 1 goroutine (100k records)"
	}
	return fmt.Sprintf("new message, memstore, through Handle, %d goroutines (100k records)", g)
}

// spread runs op for ids 0..n-1 split into g contiguous ranges, one
// goroutine each, and returns the wall time per operation from the start
// of the first to the end of the last (the goroutines start together).
func spread(n, g int, op func(i int)) sample {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	per := n / g
	for w := range g {
		lo, hi := w*per, (w+1)*per
		if w == g-1 {
			hi = n
		}
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			for i := lo; i < hi; i++ {
				op(i)
			}
		}()
	}
	ready.Wait()
	t := time.Now()
	close(start)
	done.Wait()
	return sample{value: float64(time.Since(t).Nanoseconds()) / float64(n)}
}
