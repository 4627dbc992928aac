package dedupamqp_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/redisstore"
)

// TestStoreDown: with the store down (a redis-server of the test's own,
// killed) and the receiver fail-closed, no handler runs and every delivery
// is retried in place; once the store
// is back, every order is processed exactly once.
func TestStoreDown(t *testing.T) {
	t.Parallel()
	const orders = 20
	url := testenv.RabbitMQ.Addr(t)
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	st, err := redisstore.New(t.Context(), client, &redisstore.Options{Timeout: 300 * time.Millisecond})
	require.NoError(t, err)
	top := declare(t, url, dedupamqp.Topology{Type: dedupamqp.Quorum})
	conn := dial(t, url)

	var charged deduptest.Effects
	charge := func(_ context.Context, m *dedup.Message[Order]) (struct{}, error) {
		charged.Record(m.Body.ID)
		return struct{}{}, nil
	}
	var ev events
	cfg := fastConfig("down")
	cfg.Observer = &ev
	rcv, err := dedup.NewReceiver(st, idstrategy.BodyField("id", func(o Order) string { return o.ID }), charge, cfg)
	require.NoError(t, err)
	c, err := dedupamqp.NewConsumer(url, top.Queue, rcv, top.Options())
	require.NoError(t, err)

	srv.Stop()
	var msgs []amqp.Publishing
	var ids []string
	for i := range orders {
		id := fmt.Sprintf("o-%02d", i)
		msgs = append(msgs, amqp.Publishing{MessageId: id, Body: orderJSON(t, Order{ID: id})})
		ids = append(ids, id)
	}
	publishAll(t, conn, top.Queue, msgs)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)

	eventually(t, "every delivery refused at least twice", func() bool {
		return ev.reasons()[delivery.ReasonStoreUnavailable] >= 2*orders
	})
	require.Zero(t, charged.Len(), "a handler ran while the store was down (fail-closed)")

	srv.Start()
	eventually(t, "every order acked or dead-lettered", func() bool { st := c.Stats(); return st.Acked+st.DeadLettered >= orders })
	eventually(t, "the queue drained", func() bool { return depth(t, conn, top.Queue) == 0 })
	require.NoError(t, c.Stop(t.Context()))
	charged.ExactlyOnce(ids...).Check(t) // each once: none lost, none doubled
	for _, e := range ev.snapshot() {
		if e.Decision.Reason == delivery.ReasonStoreUnavailable {
			require.ErrorIs(t, e.Err, dedup.ErrStoreUnavailable)
		}
	}
	require.Zero(t, c.Stats().DeadLettered)
}
