package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
)

type order struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

func orderID(o order) (string, error) { return o.ID, nil }

func nothing(context.Context, order) (struct{}, error) { return struct{}{}, nil }

func newMemReceiver(tb testing.TB) *dedup.Receiver[order, struct{}] {
	st, err := memstore.New(nil)
	if err != nil {
		tb.Fatal(err)
	}
	rcv, err := dedup.NewReceiver(st, orderID, nothing, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return rcv
}

// Watermill's deduplicator, the in-process peer: keyed by the message's
// UUID, or by a SHA-256 of its payload (what it offers against collisions).
func watermillDuplicates(keyed string) side {
	return side{name: "Watermill Deduplicator, " + keyed, run: func(tb testing.TB, n int) sample {
		repo, err := middleware.NewMapExpiringKeyRepository(time.Hour)
		if err != nil {
			tb.Fatal(err)
		}
		d := &middleware.Deduplicator{Repository: repo, Timeout: time.Minute,
			KeyFactory: func(m *message.Message) (string, error) { return m.UUID, nil }}
		if keyed == "SHA-256 of the body" {
			d.KeyFactory = func(m *message.Message) (string, error) {
				sum := sha256.Sum256(m.Payload)
				return hex.EncodeToString(sum[:]), nil
			}
		}
		h := d.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })
		msg := message.NewMessage("o-1", []byte(`{"id":"o-1","amount":1999}`))
		if _, err := h(msg); err != nil {
			tb.Fatal(err)
		}
		return timed(n, func(int) { _, _ = h(msg) })
	}}
}

func init() {
	ctx := context.Background()
	register(row{
		name: "duplicate answered in process, memstore, empty result",
		unit: "ns/op", n: 200_000, allocs: true,
		aim: "dedup within 10% of 83 ns, 0 allocs",
		setup: func(tb testing.TB) []side {
			return []side{
				watermillDuplicates("UUID"),
				watermillDuplicates("SHA-256 of the body"),
				{name: "dedup Handle", run: func(tb testing.TB, n int) sample {
					rcv := newMemReceiver(tb)
					o := order{ID: "o-1", Amount: 1999}
					if _, err := rcv.Handle(ctx, o); err != nil {
						tb.Fatal(err)
					}
					return timed(n, func(int) {
						if res, _ := rcv.Handle(ctx, o); res.Status != dedup.StatusDuplicate {
							tb.Fatalf("status %v, want duplicate", res.Status)
						}
					})
				}},
			}
		},
	}, row{
		name: "new message, memstore, through Handle",
		unit: "ns/op", n: 100_000, allocs: true,
		aim: "<= 1 µs, <= 5 allocs",
		setup: func(tb testing.TB) []side {
			return []side{
				{name: "memstore Acquire + Complete", run: func(tb testing.TB, n int) sample {
					st, err := memstore.New(nil)
					if err != nil {
						tb.Fatal(err)
					}
					keys := ids("default:o-", n)
					return timed(n, func(i int) {
						c, err := st.Acquire(ctx, store.AcquireRequest{Key: keys[i], Lease: dedup.DefaultLease})
						if err != nil {
							tb.Fatal(err)
						}
						if err := st.Complete(ctx, store.CompleteRequest{Key: keys[i], Token: c.Token, Retention: dedup.DefaultRetention}); err != nil {
							tb.Fatal(err)
						}
					})
				}},
				{name: "dedup Handle", run: func(tb testing.TB, n int) sample {
					rcv := newMemReceiver(tb)
					keys := ids("o-", n)
					return timed(n, func(i int) {
						if res, err := rcv.Handle(ctx, order{ID: keys[i]}); err != nil || res.Status != dedup.StatusProcessed {
							tb.Fatalf("status %v, %v", res.Status, err)
						}
					})
				}},
			}
		},
	})
}

// ids returns n distinct ids with a prefix, made before the clock starts.
func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}
