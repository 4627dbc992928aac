package rueidisstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/redisstore"
)

// batchStore is what the benchmarks drive: both stores are.
type batchStore interface {
	store.BatchStore
	store.CompleteReporter
}

// benchStores returns redisstore and rueidisstore on the shared Redis,
// each under a prefix of its own, for benchmarks that run them side by
// side in one process and one run.
func benchStores(b *testing.B) map[string]batchStore {
	c, gc := shared(b)
	rs, err := redisstore.New(b.Context(), gc, &redisstore.Options{Prefix: redistest.Prefix(b, gc)})
	if err != nil {
		b.Fatal(err)
	}
	return map[string]batchStore{"redisstore": rs, "rueidisstore": newStore(b, c, gc, nil)}
}

// newMessage is the store's part of a new message: the claim, then the
// completion.
func newMessage(b *testing.B, s batchStore, key string) {
	ctx := context.Background()
	c, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: 30 * time.Second})
	if err != nil || !c.Acquired {
		b.Fatalf("acquire %s: %v, %v", key, c.Acquired, err)
	}
	if err := s.Complete(ctx, store.CompleteRequest{Key: key, Token: c.Token, Result: []byte("ok"), Retention: time.Hour}); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkNewMessage: Acquire and Complete of a new key, one caller at a
// time and from 16 goroutines, on each store in the same run.
func BenchmarkNewMessage(b *testing.B) {
	stores := benchStores(b)
	for _, name := range []string{"redisstore", "rueidisstore"} {
		s := stores[name]
		b.Run(name+"/sequential", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				newMessage(b, s, "seq:"+strconv.FormatInt(keys.Add(1), 10))
			}
		})
		b.Run(name+"/16goroutines", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					newMessage(b, s, "par:"+strconv.FormatInt(keys.Add(1), 10))
				}
			})
		})
	}
}

// BenchmarkBatch100: AcquireBatch and CompleteBatchReport of 100 new keys,
// on each store in the same run; an op is one message.
func BenchmarkBatch100(b *testing.B) {
	stores := benchStores(b)
	ctx := context.Background()
	const size = 100
	for _, name := range []string{"redisstore", "rueidisstore"} {
		s := stores[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			acq := make([]store.AcquireRequest, size)
			done := make([]store.CompleteRequest, size)
			for i := 0; b.Loop(); i++ {
				if i%size != 0 {
					continue
				}
				for k := range acq {
					acq[k] = store.AcquireRequest{Key: "batch:" + strconv.Itoa(i+k), Lease: 30 * time.Second}
				}
				for k, o := range s.AcquireBatch(ctx, acq) {
					if o.Err != nil || !o.Claim.Acquired {
						b.Fatalf("acquire: %v", o.Err)
					}
					done[k] = store.CompleteRequest{Key: acq[k].Key, Token: o.Claim.Token, Result: []byte("ok"), Retention: time.Hour}
				}
				for _, o := range s.CompleteBatchReport(ctx, done) {
					if o.Err != nil {
						b.Fatal(o.Err)
					}
				}
			}
		})
	}
}

// keys numbers the keys of the parallel benchmark, which the testing
// package runs more than once.
var keys atomic.Int64
