package dedupamqp_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/memstore"
)

// formerRetryQueue declares the retry tier of delay as dedupamqp 0.1 did:
// named by milliseconds ("orders.retry.1000ms"), with the arguments 0.1
// gave it (its TTL, and dead-lettering through the default exchange back
// to the work queue), and deletes it when the test ends.
func formerRetryQueue(t testing.TB, conn *amqp.Connection, top dedupamqp.Topology, delay time.Duration) string {
	t.Helper()
	name := top.Queue + ".retry." + strconv.FormatInt(delay.Milliseconds(), 10) + "ms"
	_, err := channel(t, conn).QueueDeclare(name, true, false, false, false, amqp.Table{
		"x-queue-type":              string(top.Type),
		"x-message-ttl":             delay.Milliseconds(),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": top.Queue,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		conn, err := amqp.Dial(rabbitURL())
		if err != nil {
			t.Logf("clean up %s: %v", name, err)
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err == nil {
			_, err = ch.QueueDelete(name, false, false, false)
		}
		if err != nil {
			t.Logf("delete queue %s: %v", name, err)
		}
	})
	return name
}

// TestFormerRetryTier: a retry copy that dedupamqp 0.1 parked in a retry
// tier named by its rule ("<queue>.retry.1000ms", the queue left in place
// by the upgrade) comes back to the work queue when its TTL expires and is
// processed once by a consumer of now, whose own tier is named
// "<queue>.retry.1s" (the upgraded program declared its Topology again
// meanwhile): the old tier drains on its own, through the dead-lettering
// its arguments set up, and the headers 0.1 wrote on the copy are read as
// they are.
func TestFormerRetryTier(t *testing.T) {
	t.Parallel()
	forEachQueueType(t, func(t *testing.T, typ dedupamqp.QueueType) {
		const tier = time.Second
		url := testenv.RabbitMQ.Addr(t)
		top := declare(t, url, dedupamqp.Topology{Type: typ, RetryTiers: []time.Duration{tier}})
		conn := dial(t, url)
		former := formerRetryQueue(t, conn, top, tier)
		require.NotEqual(t, former, adapter.RetryName(top.Queue, tier), "the names differ, or this tests nothing")

		// The copy as 0.1's consumer published it to the tier after a
		// handler failure.
		parked := time.Now()
		publishAll(t, conn, former, []amqp.Publishing{{
			MessageId: "m-1", Body: orderJSON(t, Order{ID: "o-1", Cents: 100}), ContentType: "application/json",
			Headers: amqp.Table{
				"Tenant":                     "acme",
				"Dedup-Original-Exchange":    "",
				"Dedup-Original-Routing-Key": top.Queue,
				"Dedup-Retries":              int64(1),
				"Dedup-Retry-Reason":         "handler-error",
			},
		}})

		require.NoError(t, top.Declare(t.Context(), channel(t, conn)), "the upgraded program declares its topology")
		var mu sync.Mutex
		var runs []dedup.Message[Order]
		var ran time.Time
		done := make(chan struct{})
		charge := func(_ context.Context, m *dedup.Message[Order]) (struct{}, error) {
			mu.Lock()
			defer mu.Unlock()
			if runs = append(runs, *m); len(runs) == 1 {
				ran = time.Now()
				close(done)
			}
			return struct{}{}, nil
		}
		store, err := memstore.New(nil)
		require.NoError(t, err)
		rcv, err := dedup.NewReceiver(store, idstrategy.MessageID[Order](), charge, fastConfig("upgrade"))
		require.NoError(t, err)
		c, err := dedupamqp.NewConsumer(url, top.Queue, rcv, top.Options())
		require.NoError(t, err)
		require.NoError(t, c.Start(t.Context()))
		stopAtCleanup(t, c)

		testenv.Recv(t, done, "the copy parked in the tier of 0.1")
		ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
		defer cancel()
		require.NoError(t, c.Stop(ctx), "Stop settles what runs")

		mu.Lock()
		defer mu.Unlock()
		require.Len(t, runs, 1, "processed once")
		m := runs[0]
		require.GreaterOrEqual(t, ran.Sub(parked), tier, "back before the tier's TTL")
		require.Equal(t, "m-1", m.ID)
		require.Equal(t, Order{ID: "o-1", Cents: 100}, m.Body)
		retries, _ := m.HeaderValue(dedupamqp.HeaderRetries)
		require.Equal(t, "1", retries)
		rk, _ := m.HeaderValue(dedupamqp.HeaderOriginalRoutingKey)
		require.Equal(t, top.Queue, rk)
		death, ok := m.HeaderValue("x-death")
		require.True(t, ok, "the broker dead-lettered the expired copy back")
		require.Contains(t, death, former)
		require.EqualValues(t, 1, c.Stats().Acked)
		require.Zero(t, depth(t, conn, former), "the tier of 0.1 drained")
		require.Zero(t, depth(t, conn, top.Queue))
		require.Zero(t, depth(t, conn, adapter.RetryName(top.Queue, tier)))
	})
}
