package dedupkafka_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/memstore"
)

// TestInFlightWaitAsksAgainAndStops holds a key in another receiver, with
// the default 30s lease, while the consumer meets it: the consumer waits
// in place as Decide says (200ms, then twice as long each time) and asks
// the receiver again after each wait, so it looks at the key five times
// in about 3s instead of once per lease. Stop then ends the wait at once
// (the next one would be 2.6 to 3.2s), and the message is left uncommitted, its
// handler never run.
func TestInFlightWaitAsksAgainAndStops(t *testing.T) {
	t.Parallel()
	const topic, group = "orders", "billing"
	brokers := startKafka(t, 1, topic)
	s, err := memstore.New(nil)
	require.NoError(t, err)
	ids := idstrategy.BodyField("id", func(o Order) string { return o.ID })

	// The holder: another delivery of order 0, in a handler until the test
	// ends.
	cfg := fastConfig("billing")
	cfg.Lease = (30 * time.Second)
	held, release := make(chan struct{}), make(chan struct{})
	holder, err := dedup.NewReceiver(s, ids, func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		close(held)
		select {
		case <-release:
			return Receipt{OrderID: m.Body.ID}, nil
		case <-ctx.Done():
			return Receipt{}, ctx.Err()
		}
	}, cfg)
	require.NoError(t, err)
	holding := make(chan error, 1)
	go func() { // ends with release, which the cleanup closes
		_, err := holder.Handle(context.Background(), &dedup.Message[Order]{ID: orderID(0), Body: Order{ID: orderID(0)}})
		holding <- err
	}()
	testenv.Recv(t, held, "the holder's handler")
	t.Cleanup(func() {
		close(release)
		testenv.Recv(t, holding, "the holder")
	})

	var looks, runs atomic.Int64
	cfg2 := fastConfig("billing")
	cfg2.Lease = (30 * time.Second)
	cfg2.Observer = onSettled(func(e delivery.Event) {
		if e.Decision.Reason == delivery.ReasonInFlight {
			looks.Add(1)
		}
	})
	rcv, err := dedup.NewReceiver(s, ids, func(context.Context, *dedup.Message[Order]) (Receipt, error) {
		runs.Add(1)
		return Receipt{}, nil
	}, cfg2)
	require.NoError(t, err)
	produce(t, newWriter(t, brokers), topic, []kafka.Message{{Value: orderJSON(t, Order{ID: orderID(0)})}})
	c, err := dedupkafka.NewConsumer(newReader(t, brokers, group, topic), rcv, &dedupkafka.Options{DropPoison: true})
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)

	// Looks at 0, 0.2, 0.6, 1.4 and 3.0s (less up to 20%: jitter); waiting
	// the lease out would take 30s for the second.
	eventually(t, 15*time.Second, func() bool { return looks.Load() >= 5 }, "the consumer did not look at the held key again")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(ctx), "Stop waited for the in-flight wait")
	require.Zero(t, runs.Load(), "the consumer ran the handler of a key held elsewhere")
	require.Equal(t, map[int]int64{0: -1}, committed(t, brokers, group, topic, 1), "the waiting message is left uncommitted")
}
