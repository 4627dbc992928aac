package dedupamqp_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/memstore"
)

// forEachQueueType runs fn on a classic and on a quorum queue.
func forEachQueueType(t *testing.T, fn func(t *testing.T, typ dedupamqp.QueueType)) {
	for _, typ := range []dedupamqp.QueueType{dedupamqp.Classic, dedupamqp.Quorum} {
		t.Run(string(typ), func(t *testing.T) {
			t.Parallel()
			fn(t, typ)
		})
	}
}

// TestDecisions: an order is charged once, its copy under another message
// id is a duplicate (only the body key catches it), and the poison (not
// JSON, not UTF-8, no id, an empty body) reaches the dead-letter queue with
// its reason, the original body, properties and headers, and dedup's.
func TestDecisions(t *testing.T) {
	t.Parallel()
	forEachQueueType(t, func(t *testing.T, typ dedupamqp.QueueType) {
		url := testenv.RabbitMQ.Addr(t)
		top := declare(t, url, dedupamqp.Topology{Type: typ})
		conn := dial(t, url)

		var mu sync.Mutex
		charged := map[string]int{}
		charge := func(_ context.Context, m *dedup.Message[Order]) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			charged[m.Body.ID]++
			return "receipt-" + m.Body.ID, nil
		}
		store, err := memstore.New(nil)
		require.NoError(t, err)
		var ev events
		cfg := fastConfig("billing")
		cfg.Observer = &ev
		rcv, err := dedup.NewReceiver(store, idstrategy.BodyField("id", func(o Order) string { return o.ID }), charge, cfg)
		require.NoError(t, err)
		opts := top.Options()
		opts.Concurrency = 4
		c, err := dedupamqp.NewConsumer(url, top.Queue, rcv, opts)
		require.NoError(t, err)

		o1, o2 := orderJSON(t, Order{ID: "o-1", Cents: 100}), orderJSON(t, Order{ID: "o-2", Cents: 200})
		publishAll(t, conn, top.Queue, []amqp.Publishing{
			{MessageId: "m-1", Body: o1, ContentType: "application/json"},
			{MessageId: "m-2", Body: o2, ContentType: "application/json"},
			{MessageId: "m-1-again", Body: o1, ContentType: "application/json"},
			{MessageId: "p-1", Body: []byte(`{"id": "o-9`), Headers: amqp.Table{"tenant": "acme", "n": int32(7)}, CorrelationId: "corr-1"},
			{MessageId: "p-2", Body: []byte("{\"id\": \"o-\xff\"}")},
			{MessageId: "p-3", Body: []byte(`{"cents": 5}`)},
			{MessageId: "p-4", Body: nil},
		})
		require.NoError(t, c.Start(t.Context()))
		stopAtCleanup(t, c)

		dead := getAll(t, conn, top.DeadLetterQueue, 4)
		eventually(t, "every delivery settled", func() bool { return ev.count() == 7 })
		require.NoError(t, c.Stop(t.Context()))
		require.NoError(t, c.Err())

		mu.Lock()
		require.Equal(t, map[string]int{"o-1": 1, "o-2": 1}, charged)
		mu.Unlock()
		require.Equal(t, map[delivery.Reason]int{"processed": 2, "duplicate": 1, "undecodable": 3, "no-key": 1}, ev.reasons())

		byID := map[string]amqp.Delivery{}
		for _, d := range dead {
			byID[d.MessageId] = d
			require.Equal(t, top.Queue, d.Headers[delivery.HeaderSource])
			require.Equal(t, "", d.Headers[dedupamqp.HeaderOriginalExchange])
			require.Equal(t, top.Queue, d.Headers[dedupamqp.HeaderOriginalRoutingKey])
			require.Equal(t, d.MessageId, d.Headers[delivery.HeaderOriginalMessageID])
			require.EqualValues(t, 1, d.Headers[delivery.HeaderDeliveryCount])
			require.NotEmpty(t, d.Headers[delivery.HeaderError])
			// The one spelling of every adapter (AMQP keys are case-sensitive).
			for _, name := range []string{"Dedup-Reason", "Dedup-Error", "Dedup-Source", "Dedup-Delivery-Count",
				"Dedup-Original-Exchange", "Dedup-Original-Routing-Key", "Dedup-Original-Message-Id"} {
				require.Contains(t, d.Headers, name)
			}
			require.Equal(t, amqp.Persistent, d.DeliveryMode)
			// Ours is not copied; a quorum dead-letter queue sets its own, 0 on
			// this first delivery.
			if n, ok := d.Headers["x-delivery-count"]; ok {
				require.Equal(t, dedupamqp.Quorum, typ)
				require.EqualValues(t, 0, n)
			}
		}
		require.Len(t, byID, 4)
		p1 := byID["p-1"]
		require.Equal(t, "undecodable", p1.Headers[delivery.HeaderReason])
		require.Equal(t, []byte(`{"id": "o-9`), p1.Body)
		require.Equal(t, "acme", p1.Headers["tenant"])
		require.EqualValues(t, 7, p1.Headers["n"])
		require.Equal(t, "corr-1", p1.CorrelationId)
		require.Equal(t, "undecodable", byID["p-2"].Headers[delivery.HeaderReason])
		require.Contains(t, byID["p-2"].Headers[delivery.HeaderError], "UTF-8")
		require.Equal(t, "no-key", byID["p-3"].Headers[delivery.HeaderReason])
		require.Equal(t, "undecodable", byID["p-4"].Headers[delivery.HeaderReason])
		require.Zero(t, depth(t, conn, top.Queue))

		require.Equal(t, dedup.ConsumerStats{Delivered: 7, Acked: 3, DeadLettered: 4}, c.Stats())
	})
}

// TestStopRequeuesUnfinished: Stop at its deadline cancels a handler that
// does not finish, returns the deadline's error, and the delivery goes back
// to the queue (Nack, requeue), unacknowledged work never lost.
func TestStopRequeuesUnfinished(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	top := declare(t, url, dedupamqp.Topology{})
	conn := dial(t, url)
	started := make(chan struct{}, 1)
	var cancelled sync.WaitGroup
	cancelled.Add(1)
	block := func(ctx context.Context, m *dedup.Message[Order]) (struct{}, error) {
		started <- struct{}{}
		<-ctx.Done()
		cancelled.Done()
		return struct{}{}, ctx.Err()
	}
	store, err := memstore.New(nil)
	require.NoError(t, err)
	var ev events
	cfg := fastConfig("stop")
	cfg.Observer = &ev
	rcv, err := dedup.NewReceiver(store, idstrategy.MessageID[Order](), block, cfg)
	require.NoError(t, err)
	opts := top.Options()
	opts.Concurrency = 1
	c, err := dedupamqp.NewConsumer(url, top.Queue, rcv, opts)
	require.NoError(t, err)
	publishAll(t, conn, top.Queue, []amqp.Publishing{{MessageId: "m-1", Body: orderJSON(t, Order{ID: "o-1"})}})
	require.NoError(t, c.Start(t.Context()))
	testenv.Recv(t, started, "the handler to start")

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, c.Stop(ctx), context.DeadlineExceeded)
	testenv.Wait(t, &cancelled, "the handler's context to be cancelled")
	testenv.Recv(t, c.Stopped(), "the consumer to stop")
	require.NoError(t, c.Err())
	eventually(t, "the delivery back in the queue", func() bool { return depth(t, conn, top.Queue) == 1 })
	evs := ev.snapshot()
	require.Len(t, evs, 1)
	require.Equal(t, delivery.Retry, evs[0].Decision.Action)
	require.Equal(t, delivery.ReasonCanceled, evs[0].Decision.Reason)
	require.NoError(t, c.Stop(t.Context()), "Stop on a stopped consumer returns at once")
}

// TestQueueDeleted: deleting the queue under the consumer stops it, with
// Err matching ErrQueueDeleted and ErrStoppedUnasked.
func TestQueueDeleted(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	top := declare(t, url, dedupamqp.Topology{})
	conn := dial(t, url)
	store, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(store, idstrategy.MessageID[Order](),
		func(context.Context, *dedup.Message[Order]) (struct{}, error) { return struct{}{}, nil }, fastConfig("gone"))
	require.NoError(t, err)
	c, err := dedupamqp.NewConsumer(url, top.Queue, rcv, top.Options())
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)

	_, err = channel(t, conn).QueueDelete(top.Queue, false, false, false)
	require.NoError(t, err)
	testenv.Recv(t, c.Stopped(), "the consumer to stop")
	require.ErrorIs(t, c.Err(), dedupamqp.ErrQueueDeleted)
	require.True(t, errors.Is(c.Err(), dedupamqp.ErrQueueDeleted))
	require.ErrorIs(t, c.Err(), dedupamqp.ErrStoppedUnasked)
}

// TestStopRequeuesPrefetched: deliveries prefetched but not started when
// Stop is called are returned to the queue (Nack, requeue) unhandled, while
// the handler running finishes and is acknowledged.
func TestStopRequeuesPrefetched(t *testing.T) {
	t.Parallel()
	const msgs = 10
	url := testenv.RabbitMQ.Addr(t)
	top := declare(t, url, dedupamqp.Topology{})
	conn := dial(t, url)
	started := make(chan struct{}, msgs)
	release := make(chan struct{})
	var mu sync.Mutex
	runs := 0
	handler := func(ctx context.Context, m *dedup.Message[Order]) (struct{}, error) {
		mu.Lock()
		runs++
		mu.Unlock()
		started <- struct{}{}
		<-release
		return struct{}{}, nil
	}
	store, err := memstore.New(nil)
	require.NoError(t, err)
	var ev events
	cfg := fastConfig("prefetched")
	cfg.Observer = &ev
	rcv, err := dedup.NewReceiver(store, idstrategy.MessageID[Order](), handler, cfg)
	require.NoError(t, err)
	opts := top.Options()
	opts.Concurrency, opts.Prefetch = 1, msgs
	c, err := dedupamqp.NewConsumer(url, top.Queue, rcv, opts)
	require.NoError(t, err)
	var batch []amqp.Publishing
	for i := range msgs {
		batch = append(batch, amqp.Publishing{MessageId: fmt.Sprintf("m-%d", i), Body: orderJSON(t, Order{ID: "o"})})
	}
	publishAll(t, conn, top.Queue, batch)
	require.NoError(t, c.Start(t.Context()))
	testenv.Recv(t, started, "the first handler")

	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(t.Context()) }()
	// Stop has cancelled the consumer on the broker once the queue has
	// none left: only then may the running handler finish.
	eventually(t, "the consumer cancelled", func() bool {
		q, err := channel(t, conn).QueueDeclarePassive(top.Queue, true, false, false, false, nil)
		return err == nil && q.Consumers == 0
	})
	close(release)
	require.NoError(t, testenv.Recv(t, stopped, "Stop"))
	mu.Lock()
	require.Equal(t, 1, runs, "deliveries handled after Stop")
	mu.Unlock()
	require.Equal(t, msgs-1, depth(t, conn, top.Queue))
	require.Equal(t, map[delivery.Reason]int{delivery.ReasonProcessed: 1, delivery.ReasonCanceled: msgs - 1}, ev.reasons())
	for _, e := range ev.snapshot() {
		require.True(t, e.Settled)
		require.NoError(t, e.SettleErr)
		require.Equal(t, top.Queue, e.Source)
	}
	st := c.Stats()
	require.GreaterOrEqual(t, st.Delivered, uint64(msgs))
	st.Delivered = 0
	require.Equal(t, dedup.ConsumerStats{Acked: 1}, st, "a delivery returned unhandled counted as a retry")
}
