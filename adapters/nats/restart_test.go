package dedupnats_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/memstore"
	"github.com/dedup-go/dedup/store/redisstore"
)

// publishOrders publishes count orders with their Nats-Msg-Id and returns
// their ids.
func publishOrders(t testing.TB, js jetstream.JetStream, subject string, count int) []string {
	t.Helper()
	var ids []string
	for i := range count {
		o := Order{ID: fmt.Sprintf("o-%05d", i), Cents: 100 + i}
		ids = append(ids, o.ID)
		m := natsgo.NewMsg(subject)
		m.Data = orderJSON(t, o)
		m.Header.Set(jetstream.MsgIDHeader, o.ID)
		_, err := js.PublishMsgAsync(m)
		require.NoError(t, err)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("publishing did not complete")
	}
	return ids
}

// TestJetStreamRestartWithoutDrain closes the connection of a consumer in
// the middle of the stream, without Stop, with handlers running, and starts
// a new one on a new connection (the store survives, as a shared store
// would): nothing is lost, nothing is charged twice.
func TestJetStreamRestartWithoutDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("a slow fault test (a server or process killed or restarted): skipped under -short")
	}
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		const orders = 1000
		_, js := connect(t, url)
		n := newNames()
		streams(t, js, n)
		cfg := jetstream.ConsumerConfig{AckWait: time.Second, MaxDeliver: 20}
		consumer(t, js, n, cfg)
		want := publishOrders(t, js, n.subject, orders)

		fx := newEffects()
		crash := make(chan struct{})
		var crashOnce atomic.Bool
		charge := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
			total := fx.add(m.Body.ID)
			if total == orders/3 && crashOnce.CompareAndSwap(false, true) {
				close(crash)
			}
			time.Sleep(time.Millisecond) // handlers are running when the connection goes
			return Receipt{OrderID: m.Body.ID, Charge: total}, nil
		}
		store, err := memstore.New(nil)
		require.NoError(t, err)
		rcv, err := dedup.NewReceiver(store, idstrategy.BodyField("id", func(o Order) string { return o.ID }), charge, fastConfig("billing"))
		require.NoError(t, err)

		// First process: its connection dies mid-stream.
		nc1, err := natsgo.Connect(url, natsgo.MaxReconnects(0))
		require.NoError(t, err)
		js1, err := jetstream.New(nc1)
		require.NoError(t, err)
		cons1, err := js1.Consumer(t.Context(), n.stream, n.consumer)
		require.NoError(t, err)
		c1, err := dedupnats.NewConsumer(js1, cons1, rcv, &dedupnats.Options{Concurrency: 8, DropPoison: true})
		require.NoError(t, err)
		require.NoError(t, c1.Start(t.Context()))
		testenv.Recv(t, crash, "the crash")
		nc1.Close()
		select {
		case <-c1.Stopped():
		case <-time.After(20 * time.Second):
			t.Fatal("the consumer did not stop when its connection closed")
		}
		require.Error(t, c1.Err(), "a closed connection is reported")
		require.Less(t, fx.Len(), orders, "the crash came too late to test anything")

		// Second process: same durable consumer, same store.
		_, js2 := connect(t, url)
		cons2, err := js2.Consumer(t.Context(), n.stream, n.consumer)
		require.NoError(t, err)
		c2, err := dedupnats.NewConsumer(js2, cons2, rcv, &dedupnats.Options{Concurrency: 8, DropPoison: true})
		require.NoError(t, err)
		require.NoError(t, c2.Start(t.Context()))
		stopAtCleanup(t, c2)

		settled(t, cons2, 60*time.Second)
		fx.ExactlyOnce(want...).Check(t)
	})
}

// TestJetStreamStoreDownFailClosed: while the store's Redis is down (a
// redis-server of the test's own, killed), the handler never runs and every
// delivery is Nak'd with the store retry delay; once Redis is back, every
// order is processed exactly once.
func TestJetStreamStoreDownFailClosed(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		const orders = 50
		_, js := connect(t, url)
		n := newNames()
		streams(t, js, n)
		cons := consumer(t, js, n, jetstream.ConsumerConfig{AckWait: 5 * time.Second, MaxDeliver: 100})

		srv := redistest.StartServer(t)
		client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { _ = client.Close() })
		// A killed server refuses at once: the bound is for New's ping and
		// script load, which a busy machine has taken over 200 ms to answer.
		store, err := redisstore.New(t.Context(), client, &redisstore.Options{Timeout: 5 * time.Second})
		require.NoError(t, err)
		srv.Stop()
		fx := newEffects()
		charge := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
			return Receipt{OrderID: m.Body.ID, Charge: fx.add(m.Body.ID)}, nil
		}
		var refused atomic.Int64
		var badDelay atomic.Value
		refusals := onSettled(func(e delivery.Event) {
			if e.Decision.Reason == delivery.ReasonStoreUnavailable {
				refused.Add(1)
				if e.Decision.Action != delivery.Retry || e.Decision.Delay != 200*time.Millisecond || !errors.Is(e.Err, dedup.ErrStoreUnavailable) {
					badDelay.Store(fmt.Sprintf("%+v", e.Decision))
				}
			}
		})
		rcv, err := dedup.NewReceiver(store, idstrategy.BodyField("id", func(o Order) string { return o.ID }), charge,
			observed(fastConfig("billing"), refusals))
		require.NoError(t, err)
		c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DropPoison: true})
		require.NoError(t, err)
		want := publishOrders(t, js, n.subject, orders)
		require.NoError(t, c.Start(t.Context()))
		stopAtCleanup(t, c)

		// Every order is refused at least twice: redelivered after the Nak.
		require.Eventually(t, func() bool { return refused.Load() >= 2*orders }, 30*time.Second, 20*time.Millisecond)
		require.Zero(t, fx.Len(), "the handler ran while the store was down")
		require.Nil(t, badDelay.Load(), "a refused delivery was not Nak'd with the store retry delay")
		info, err := cons.Info(t.Context())
		require.NoError(t, err)
		require.Positive(t, info.NumAckPending+int(info.NumPending)+info.NumRedelivered, "nothing is waiting for redelivery")

		srv.Start()
		settled(t, cons, 30*time.Second)
		fx.ExactlyOnce(want...).Check(t)
	})
}
