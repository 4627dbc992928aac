package dedupnats_test

import (
	"context"
	"errors"
	"sync/atomic"
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

// TestStopDeadlineCancelsHandlers: Stop with a deadline that a handler
// outlives cancels the handler's context, returns the deadline's error,
// and the message is Nak'd: a later consumer processes it once.
func TestStopDeadlineCancelsHandlers(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		_, js := connect(t, url)
		n := newNames()
		streams(t, js, n)
		cons := consumer(t, js, n, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 5})
		store, err := memstore.New(nil)
		require.NoError(t, err)
		fx := newEffects()
		started, cancelled := make(chan struct{}), make(chan error, 1)
		var first atomic.Bool
		rcv, err := dedup.NewReceiver(store, bodyID, func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
			if first.CompareAndSwap(false, true) {
				close(started)
				<-ctx.Done() // only the Stop deadline ends this one
				cancelled <- ctx.Err()
				return Receipt{}, ctx.Err()
			}
			return Receipt{OrderID: m.Body.ID, Charge: fx.add(m.Body.ID)}, nil
		}, fastConfig("stop"))
		require.NoError(t, err)
		c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DeadLetterSubject: n.dlq})
		require.NoError(t, err)
		_, err = js.Publish(t.Context(), n.subject, orderJSON(t, Order{ID: "o-1"}))
		require.NoError(t, err)
		require.NoError(t, c.Start(t.Context()))
		testenv.Recv(t, started, "the handler to start")

		stopCtx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, c.Stop(stopCtx), context.DeadlineExceeded)
		require.ErrorIs(t, testenv.Recv(t, cancelled, "the handler's context to be cancelled"), context.Canceled)
		testenv.Recv(t, c.Stopped(), "the consumer to stop")
		require.NoError(t, c.Err())

		// The Nak'd message comes back to the next consumer.
		again, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DeadLetterSubject: n.dlq})
		require.NoError(t, err)
		require.NoError(t, again.Start(t.Context()))
		stopAtCleanup(t, again)
		settled(t, cons, 20*time.Second) // acked or terminated: its effect, if any, happened
		fx.ExactlyOnce("o-1").Check(t)
	})
}

// TestInProgressHoldsLongHandler: a handler running three times past
// AckWait, with a third of its lease under AckWait, is not redelivered at
// all: the broker's own counts (NumRedelivered, the delivery count) show it.
// The receiver cannot tell: its claim would answer a redelivery in flight
// either way, so only the broker shows whether InProgress was sent.
func TestInProgressHoldsLongHandler(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		const ackWait = time.Second
		_, js := connect(t, url)
		n := newNames()
		streams(t, js, n)
		cons := consumer(t, js, n, jetstream.ConsumerConfig{AckWait: ackWait, MaxDeliver: 10})
		store, err := memstore.New(nil)
		require.NoError(t, err)
		var runs, deliveries atomic.Int64
		var maxCount atomic.Int64
		cfg := observed(fastConfig("long"), onSettled(func(e delivery.Event) {
			deliveries.Add(1)
			if int64(e.DeliveryCount) > maxCount.Load() {
				maxCount.Store(int64(e.DeliveryCount))
			}
		}))
		rcv, err := dedup.NewReceiver(store, bodyID, func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
			runs.Add(1)
			select {
			case <-time.After(3 * ackWait):
				return Receipt{OrderID: m.Body.ID}, nil
			case <-ctx.Done():
				return Receipt{}, errors.New("cancelled")
			}
		}, cfg)
		require.NoError(t, err)
		c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DeadLetterSubject: n.dlq, StrictHorizon: false})
		require.NoError(t, err)
		_, err = js.Publish(t.Context(), n.subject, orderJSON(t, Order{ID: "o-1"}))
		require.NoError(t, err)
		require.NoError(t, c.Start(t.Context()))
		stopAtCleanup(t, c)

		settled(t, cons, 20*time.Second)
		require.Eventually(t, func() bool { return deliveries.Load() >= 1 }, 10*time.Second, 10*time.Millisecond)
		info, err := cons.Info(t.Context())
		require.NoError(t, err)
		require.Zero(t, info.NumRedelivered, "JetStream redelivered the message while its handler ran")
		require.EqualValues(t, 1, info.Delivered.Consumer, "JetStream delivered the message more than once")
		require.EqualValues(t, 1, deliveries.Load())
		require.EqualValues(t, 1, maxCount.Load())
		require.EqualValues(t, 1, runs.Load())
	})
}
