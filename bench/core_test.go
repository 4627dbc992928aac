package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
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

// receipt is the small result of the duplicate row that replays one: what
// a payment handler might return, stored as {"order":42,"status":"captured"}.
type receipt struct {
	Order  int    `json:"order"`
	Status string `json:"status"`
}

// completedOnce makes a receiver over a memstore of its own with handler,
// completes order o-1 through it, and returns it with the store and the
// prefix and id under which the store holds the record, for Peek.
func completedOnce[R any](tb testing.TB, handler func(context.Context, order) (R, error)) (*dedup.Receiver[order, R], *memstore.Store, string, string) {
	st, err := memstore.New(nil)
	if err != nil {
		tb.Fatal(err)
	}
	rcv, err := dedup.NewReceiver(st, orderID, handler, nil)
	if err != nil {
		tb.Fatal(err)
	}
	o := order{ID: "o-1", Amount: 1999}
	res, err := rcv.Handle(context.Background(), o)
	if err != nil || res.Status != delivery.StatusProcessed {
		tb.Fatalf("first delivery: status %v, %v", res.Status, err)
	}
	prefix, ok := strings.CutSuffix(res.Key, o.ID)
	if !ok || st.Peek(prefix, o.ID) == nil {
		tb.Fatalf("the record of %q is not found by Peek(%q, %q)", res.Key, prefix, o.ID)
	}
	return rcv, st, prefix, o.ID
}

// duplicates is the side that sends o-1 again and again through rcv,
// checking that each is answered as a duplicate with want.
func duplicates[R comparable](rcv *dedup.Receiver[order, R], want R) func(tb testing.TB, n int) sample {
	return func(tb testing.TB, n int) sample {
		ctx := context.Background()
		o := order{ID: "o-1", Amount: 1999}
		return timed(n, func(int) {
			if res, err := rcv.Handle(ctx, o); err != nil || res.Status != delivery.StatusDuplicate || res.Value != want {
				tb.Fatalf("status %v, value %+v, %v; want a duplicate with %+v", res.Status, res.Value, err, want)
			}
		})
	}
}

func init() {
	ctx := context.Background()
	register(row{
		name: "duplicate answered in process, memstore, empty result",
		unit: "ns/op", n: 200_000, allocs: true,
		setup: func(tb testing.TB) []side {
			rcv, st, prefix, id := completedOnce(tb, nothing)
			return []side{
				{name: "floor: memstore Peek of the completed record", run: func(tb testing.TB, n int) sample {
					return timed(n, func(int) {
						if st.Peek(prefix, id) == nil {
							tb.Fatalf("Peek(%q, %q) found nothing", prefix, id)
						}
					})
				}},
				{name: "dedup Handle", run: duplicates(rcv, struct{}{})},
				watermillDuplicates("UUID"),
				watermillDuplicates("SHA-256 of the body"),
			}
		},
		versus: []versus{{name: "dedup Handle over Watermill Deduplicator, UUID", a: 1, b: 2}},
	}, row{
		name: `duplicate answered in process, memstore, small JSON result ({"order":42,"status":"captured"})`,
		unit: "ns/op", n: 200_000, allocs: true,
		setup: func(tb testing.TB) []side {
			want := receipt{Order: 42, Status: "captured"}
			rcv, st, prefix, id := completedOnce(tb, func(context.Context, order) (receipt, error) { return want, nil })
			if got := string(st.Peek(prefix, id).Result); got != `{"order":42,"status":"captured"}` {
				tb.Fatalf("stored result %s", got)
			}
			return []side{
				{name: "floor: memstore Peek + json.Unmarshal of the result", run: func(tb testing.TB, n int) sample {
					return timed(n, func(int) {
						rec := st.Peek(prefix, id)
						if rec == nil {
							tb.Fatalf("Peek(%q, %q) found nothing", prefix, id)
						}
						var got receipt
						if err := json.Unmarshal(rec.Result, &got); err != nil || got != want {
							tb.Fatalf("decoded %+v, %v", got, err)
						}
					})
				}},
				{name: "dedup Handle", run: duplicates(rcv, want)},
				watermillDuplicates("UUID"),
			}
		},
		versus: []versus{{name: "dedup Handle over Watermill Deduplicator, UUID (which returns no result)", a: 1, b: 2}},
	}, row{
		name: "new message, memstore, through Handle",
		unit: "ns/op", n: 100_000, allocs: true,
		setup: func(tb testing.TB) []side {
			return []side{
				{name: "memstore Acquire + Complete", run: func(tb testing.TB, n int) sample {
					st, err := memstore.New(nil)
					if err != nil {
						tb.Fatal(err)
					}
					keys := ids("default:o-", n)
					return timed(n, func(i int) {
						c, err := st.Acquire(ctx, store.AcquireRequest{Key: keys[i], Lease: (30 * time.Second)})
						if err != nil {
							tb.Fatal(err)
						}
						if err := st.Complete(ctx, store.CompleteRequest{Key: keys[i], Token: c.Token, Retention: (24 * time.Hour)}); err != nil {
							tb.Fatal(err)
						}
					})
				}},
				{name: "dedup Handle", run: func(tb testing.TB, n int) sample {
					rcv := newMemReceiver(tb)
					keys := ids("o-", n)
					return timed(n, func(i int) {
						if res, err := rcv.Handle(ctx, order{ID: keys[i]}); err != nil || res.Status != delivery.StatusProcessed {
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
