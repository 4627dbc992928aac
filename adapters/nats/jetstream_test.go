package dedupnats_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

// TestJetStreamExactlyOnce publishes 5,000 orders, 20% of them again without
// Nats-Msg-Id (so JetStream's duplicate window cannot catch them), plus
// poison messages; handlers fail transiently at random and a few sleep past
// AckWait. Every order must be charged exactly once, and every poison
// message must reach the dead-letter stream with its reason.
func TestJetStreamExactlyOnce(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		const orders, repeatEvery, ackWait = 5000, 5, 2 * time.Second
		nc, js := connect(t, url)
		n := newNames()
		streams(t, js, n)
		cons := consumer(t, js, n, jetstream.ConsumerConfig{AckWait: ackWait, MaxDeliver: 20})

		sleepers := map[string]bool{"o-00007": true, "o-01234": true, "o-04321": true}
		var (
			fx          = newEffects()
			failedOnce  sync.Map // order id -> struct{}: transient failure already injected
			transient   atomic.Int64
			sleeperSeen sync.Map // order id -> deliveries that ran the handler
		)
		charge := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
			id := m.Body.ID
			if sleepers[id] {
				v, _ := sleeperSeen.LoadOrStore(id, new(atomic.Int64))
				v.(*atomic.Int64).Add(1)
				// Past AckWait. The heartbeat's InProgress keeps JetStream
				// from redelivering meanwhile, but a redelivery would not
				// run the handler again either: the claim answers it in
				// flight. So one run per sleeper proves the claim, not
				// InProgress; TestInProgressHoldsLongHandler watches the
				// broker's own delivery count for that.
				select {
				case <-time.After(ackWait + 1500*time.Millisecond):
				case <-ctx.Done():
					return Receipt{}, ctx.Err()
				}
			} else if h := fnv.New32a(); true {
				h.Write([]byte(id))
				if h.Sum32()%10 == 0 { // ~10% fail once, transiently
					if _, loaded := failedOnce.LoadOrStore(id, struct{}{}); !loaded {
						transient.Add(1)
						return Receipt{}, errors.New("payment gateway timeout")
					}
				}
			}
			return Receipt{OrderID: id, Charge: fx.add(id)}, nil
		}
		store, err := memstore.New(nil)
		require.NoError(t, err)
		var mu sync.Mutex
		decisions := map[delivery.Reason]int{}
		brokers := map[string]int{}
		count := onSettled(func(e delivery.Event) {
			mu.Lock()
			decisions[e.Decision.Reason]++
			brokers[e.Broker+" "+e.Source]++
			mu.Unlock()
		})
		rcv, err := dedup.NewReceiver(store, idstrategy.BodyField("id", func(o Order) string { return o.ID }), charge,
			observed(fastConfig("billing"), count))
		require.NoError(t, err)
		c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{
			Concurrency:       16,
			DeadLetterSubject: n.dlq,
		})
		require.NoError(t, err)

		// Publish: every order with its Nats-Msg-Id, every fifth again
		// without one, and the poison.
		ctx := t.Context()
		var want []string
		for i := range orders {
			o := Order{ID: fmt.Sprintf("o-%05d", i), Cents: 100 + i}
			want = append(want, o.ID)
			m := natsgo.NewMsg(n.subject)
			m.Data = orderJSON(t, o)
			m.Header.Set(jetstream.MsgIDHeader, o.ID)
			_, err := js.PublishMsgAsync(m)
			require.NoError(t, err)
			if i%repeatEvery == 0 {
				_, err := js.PublishAsync(n.subject, orderJSON(t, o))
				require.NoError(t, err)
			}
		}
		poison := [][]byte{[]byte(`{"id": "o-9`), []byte(`not json at all`), {}, []byte(`{"cents": 5}`), []byte(`{"id": "", "cents": 6}`)}
		for _, p := range poison {
			_, err := js.PublishAsync(n.subject, p)
			require.NoError(t, err)
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(30 * time.Second):
			t.Fatal("publishing did not complete")
		}

		require.NoError(t, c.Start(ctx))
		stopAtCleanup(t, c)

		settled(t, cons, 90*time.Second)
		dead := deadLetters(t, js, n, len(poison), 10*time.Second)
		require.NoError(t, c.Stop(ctx))
		require.NoError(t, c.Err())
		require.False(t, nc.IsClosed())

		fx.ExactlyOnce(want...).Check(t)
		require.Positive(t, transient.Load(), "no transient failure was injected")
		for id := range sleepers {
			v, ok := sleeperSeen.Load(id)
			require.True(t, ok, "sleeper %s never ran", id)
			require.EqualValues(t, 1, v.(*atomic.Int64).Load(), "sleeper %s ran again while its claim was held", id)
		}

		reasons := map[string]int{}
		for _, m := range dead {
			h := m.Headers()
			reasons[h.Get(delivery.HeaderReason)]++
			require.Equal(t, n.stream, h.Get(delivery.HeaderStream))
			require.Equal(t, n.subject, h.Get(delivery.HeaderSource))
			require.NotEmpty(t, h.Get(delivery.HeaderOffset))
			require.Equal(t, "1", h.Get(delivery.HeaderDeliveryCount))
			require.NotEmpty(t, h.Get(delivery.HeaderError))
		}
		require.Equal(t, map[string]int{"undecodable": 3, "no-key": 2}, reasons)
		require.Len(t, dead, len(poison))

		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, orders, decisions[delivery.ReasonProcessed])
		require.GreaterOrEqual(t, decisions[delivery.ReasonDuplicate], orders/repeatEvery, "the republished copies must be answered as duplicates")
		// Concurrent copies of a failing order share its error (singleflight).
		require.GreaterOrEqual(t, int64(decisions[delivery.ReasonHandlerError]), transient.Load())
		require.Equal(t, []string{"jetstream " + n.subject}, slices.Collect(maps.Keys(brokers)))
		t.Logf("decisions: %v", decisions)
	})
}
