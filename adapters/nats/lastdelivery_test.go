package dedupnats_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/memstore"
)

// TestLastDeliveryWaitsForHolder: the last delivery a consumer allows
// (MaxDeliver 2) finds the order's key held by another process (here a
// receiver of its own on the shared store, with its own copy of the order).
// It is not dead-lettered: it waits for the holder's outcome. A holder that
// completes makes it a duplicate (acked, one effect); a holder that fails
// leaves the key to it, and it runs the handler itself (one effect). Either
// way nothing reaches the dead-letter stream.
func TestLastDeliveryWaitsForHolder(t *testing.T) {
	t.Parallel()
	for _, holderFails := range []bool{false, true} {
		name := map[bool]string{false: "holder completes", true: "holder fails"}[holderFails]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			forEachServer(t, func(t *testing.T, url string) {
				_, js := connect(t, url)
				n := newNames()
				streams(t, js, n)
				cons := consumer(t, js, n, jetstream.ConsumerConfig{AckWait: time.Second, MaxDeliver: 2})
				store, err := memstore.New(nil)
				require.NoError(t, err)
				fx := newEffects()

				// The other process: it claims o-1 and holds it until told.
				// The handler honours its context, and release is closed at
				// cleanup whatever happened, so a failure never hangs.
				started, release := make(chan struct{}), make(chan struct{})
				releaseHolder := sync.OnceFunc(func() { close(release) })
				t.Cleanup(releaseHolder)
				holder, err := dedup.NewReceiver(store, bodyID, func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
					close(started)
					select {
					case <-release:
					case <-ctx.Done():
						return Receipt{}, ctx.Err()
					}
					if holderFails {
						return Receipt{}, errors.New("gateway down")
					}
					return Receipt{OrderID: m.Body.ID, Charge: fx.add(m.Body.ID)}, nil
				}, fastConfig("billing"))
				require.NoError(t, err)
				held := make(chan error, 1)
				go func() {
					_, err := holder.Handle(t.Context(), &dedup.Message[Order]{Body: Order{ID: "o-1"}, Source: "elsewhere"})
					held <- err
				}()
				testenv.Recv(t, started, "the holder's handler to start")

				// This process: the consumer sees its copy of o-1 twice.
				var mu sync.Mutex
				var events []delivery.Event
				cfg := observed(fastConfig("billing"), onSettled(func(e delivery.Event) {
					mu.Lock()
					events = append(events, e)
					mu.Unlock()
				}))
				rcv, err := dedup.NewReceiver(store, bodyID, func(_ context.Context, m *dedup.Message[Order]) (Receipt, error) {
					return Receipt{OrderID: m.Body.ID, Charge: fx.add(m.Body.ID)}, nil
				}, cfg)
				require.NoError(t, err)
				c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DeadLetterSubject: n.dlq})
				require.NoError(t, err)
				_, err = js.Publish(t.Context(), n.subject, orderJSON(t, Order{ID: "o-1"}))
				require.NoError(t, err)
				require.NoError(t, c.Start(t.Context()))
				stopAtCleanup(t, c)

				// Both deliveries have met the held key; the second waits.
				require.Eventually(t, func() bool {
					info, err := cons.Info(t.Context())
					return err == nil && info.NumRedelivered == 1 && info.NumPending == 0
				}, 20*time.Second, 20*time.Millisecond, "the message was not redelivered")
				// Past the last delivery's AckWait: InProgress keeps it.
				time.Sleep(1500 * time.Millisecond)
				releaseHolder()
				err = testenv.Recv(t, held, "the holder to finish")
				require.Equal(t, holderFails, err != nil)

				settled(t, cons, 20*time.Second)
				require.NoError(t, c.Stop(t.Context())) // every settlement reported and counted
				fx.ExactlyOnce("o-1").Check(t)
				mu.Lock()
				defer mu.Unlock()
				// The first delivery is Nak'd; the last is held in place,
				// each wait a try of its own (reported when the message
				// is handed to the receiver again), until the holder's
				// outcome settles it.
				require.GreaterOrEqual(t, len(events), 3, "the last delivery was never held")
				for i, e := range events[:len(events)-1] {
					require.Equal(t, delivery.ReasonInFlight, e.Decision.Reason, i)
					require.Equal(t, delivery.Retry, e.Decision.Action, i)
					require.Equal(t, min(i+1, 2), e.DeliveryCount, i)
				}
				last := events[len(events)-1]
				require.Equal(t, 2, last.DeliveryCount)
				require.Equal(t, delivery.Ack, last.Decision.Action)
				require.Equal(t, map[bool]delivery.Reason{false: delivery.ReasonDuplicate, true: delivery.ReasonProcessed}[holderFails], last.Decision.Reason)
				require.Equal(t, dedup.ConsumerStats{Delivered: 2, Acked: 1, RetriedInPlace: uint64(len(events) - 1)}, c.Stats())
				dlq, err := js.Stream(t.Context(), n.dlqStream)
				require.NoError(t, err)
				info, err := dlq.Info(t.Context())
				require.NoError(t, err)
				require.Zero(t, info.State.Msgs, "a spurious dead letter")
			})
		})
	}
}

// TestLastDeliveryDeadLettersRetry: a message whose handler keeps failing
// transiently (attempts left) is dead-lettered as max-deliver on the last
// delivery JetStream allows, instead of being Nak'd into nothing.
func TestLastDeliveryDeadLettersRetry(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		_, js := connect(t, url)
		n := newNames()
		streams(t, js, n)
		cons := consumer(t, js, n, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 3})
		store, err := memstore.New(nil)
		require.NoError(t, err)
		cfg := fastConfig("md")
		cfg.MaxAttempts = 10
		var mu sync.Mutex
		runs := 0
		rcv, err := dedup.NewReceiver(store, bodyID, func(context.Context, *dedup.Message[Order]) (Receipt, error) {
			mu.Lock()
			runs++
			mu.Unlock()
			return Receipt{}, errors.New("gateway timeout")
		}, cfg)
		require.NoError(t, err)
		c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DeadLetterSubject: n.dlq})
		require.NoError(t, err)
		_, err = js.Publish(t.Context(), n.subject, orderJSON(t, Order{ID: "o-1"}))
		require.NoError(t, err)
		require.NoError(t, c.Start(t.Context()))
		stopAtCleanup(t, c)

		dead := deadLetters(t, js, n, 1, 20*time.Second)
		settled(t, cons, 20*time.Second)
		require.Len(t, dead, 1)
		h := dead[0].Headers()
		require.Equal(t, string(dedupnats.ReasonMaxDeliver), h.Get(delivery.HeaderReason))
		require.Equal(t, "3", h.Get(delivery.HeaderDeliveryCount))
		require.Contains(t, h.Get(delivery.HeaderError), "gateway timeout")
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, 3, runs)
	})
}
