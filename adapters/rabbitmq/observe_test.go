package dedupamqp_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/adaptertest"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/memstore"
)

// tracer stands for a tracing Observer (adaptertest.Tracer).
type tracer = adaptertest.Tracer

type outcome struct {
	action delivery.Action
	reason delivery.Reason
	count  int // the delivery count
}

// TestOneEventPerDelivery: every handing of a message to the receiver is
// one delivery, reported once to the Observer, settled, with its origin:
// on a quorum queue, an order processed, an undecodable body (Refused),
// an order whose handler fails twice (returned to the queue: three
// deliveries, counted by the broker), a permanent failure, and two copies
// of a slow order, the second held in place while the first runs (each
// try a delivery of its own, of the same broker delivery) and then
// answered as a duplicate. Each event is observed under its own
// delivery's context; the dead letters carry that context's trace (the
// producer's traceparent replaced). Stats counts what was done.
func TestOneEventPerDelivery(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	top := declare(t, url, dedupamqp.Topology{Type: dedupamqp.Quorum})
	conn := dial(t, url)

	var tr tracer
	var mu sync.Mutex
	keyed := map[string]int{} // message id -> the deliveries the receiver was handed
	body := idstrategy.BodyField("id", func(o Order) string { return o.ID })
	key := func(m *dedup.Message[Order]) (string, error) {
		mu.Lock()
		keyed[m.ID]++
		mu.Unlock()
		return body(m)
	}
	release := make(chan struct{})
	var o3 atomic.Int32
	handler := func(ctx context.Context, m *dedup.Message[Order]) (struct{}, error) {
		switch m.Body.ID {
		case "o-3":
			if o3.Add(1) <= 2 {
				return struct{}{}, errors.New("gateway timeout")
			}
		case "o-4":
			return struct{}{}, dedup.Permanent(errors.New("card declined"))
		case "slow":
			select {
			case <-release:
			case <-ctx.Done():
				return struct{}{}, ctx.Err()
			}
		}
		return struct{}{}, nil
	}
	cfg := fastConfig("billing")
	cfg.Observer = &tr
	cfg.NoWait = true // the copy of the slow order is refused as in flight at once
	store, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(store, key, handler, cfg)
	require.NoError(t, err)
	opts := top.Options()
	opts.Concurrency = 4
	c, err := dedupamqp.NewConsumer(url, top.Queue, rcv, opts)
	require.NoError(t, err)
	publishAll(t, conn, top.Queue, []amqp.Publishing{
		{MessageId: "m-1", Body: orderJSON(t, Order{ID: "o-1"})},
		{MessageId: "m-2", Body: []byte("not json"), Headers: amqp.Table{"traceparent": "producer"}},
		{MessageId: "m-3", Body: orderJSON(t, Order{ID: "o-3"})},
		{MessageId: "m-4", Body: orderJSON(t, Order{ID: "o-4"})},
		{MessageId: "m-5", Body: orderJSON(t, Order{ID: "slow"})},
		{MessageId: "m-6", Body: orderJSON(t, Order{ID: "slow"})},
	})
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)

	eventually(t, "the copy of the slow order held twice", func() bool { return tr.Reasons()[delivery.ReasonInFlight] >= 2 })
	close(release)
	eventually(t, "every message settled", func() bool {
		r := tr.Reasons()
		return r[delivery.ReasonProcessed] >= 3 && r[delivery.ReasonDuplicate] >= 1 && r[delivery.ReasonUndecodable] >= 1 && r[delivery.ReasonPermanent] >= 1
	})
	require.NoError(t, c.Stop(t.Context()))
	require.NoError(t, c.Err())

	events, spans, started := tr.Snapshot()
	require.Equal(t, started, len(events), "deliveries started and deliveries reported differ")
	seen := map[string]bool{}
	got := map[string][]outcome{}
	spanOf := map[string]string{} // message id -> the span of its last delivery
	holds := 0
	for i, e := range events {
		require.True(t, e.Settled, "event %d not settled", i)
		require.NoError(t, e.SettleErr, "event %d", i)
		require.Equal(t, dedupamqp.BrokerRabbitMQ, e.Broker)
		require.Equal(t, "rabbitmq", e.Broker)
		require.Equal(t, top.Queue, e.Source)
		require.Equal(t, "billing", e.Namespace)
		require.NotEmpty(t, spans[i], "event %d not observed with its delivery's context", i)
		require.False(t, seen[spans[i]], "two events of one delivery: %s", spans[i])
		seen[spans[i]] = true
		require.True(t, strings.Contains(spans[i], "-"+e.MessageID+"-"+e.Source+"-") && strings.HasSuffix(spans[i], "-"+strconv.Itoa(e.DeliveryCount)),
			"the event's context %q is another delivery's", spans[i])
		if e.Decision.Reason == delivery.ReasonInFlight {
			holds++
			require.Zero(t, e.SettleDuration, "a hold sends nothing to the broker")
		} else {
			require.Positive(t, e.SettleDuration, "event %d: the settlement was not timed", i)
		}
		got[e.MessageID] = append(got[e.MessageID], outcome{e.Decision.Action, e.Decision.Reason, e.DeliveryCount})
		spanOf[e.MessageID] = spans[i]
	}
	slowFirst, slowHeld := "m-5", "m-6"
	if len(got["m-5"]) > 1 {
		slowFirst, slowHeld = slowHeld, slowFirst
	}
	held := make([]outcome, 0, holds+1)
	for range holds {
		held = append(held, outcome{delivery.Retry, delivery.ReasonInFlight, 1})
	}
	held = append(held, outcome{delivery.Ack, delivery.ReasonDuplicate, 1})
	require.Equal(t, map[string][]outcome{
		"m-1":     {{delivery.Ack, delivery.ReasonProcessed, 1}},
		"m-2":     {{delivery.DeadLetter, delivery.ReasonUndecodable, 1}},
		"m-3":     {{delivery.Retry, delivery.ReasonHandlerError, 1}, {delivery.Retry, delivery.ReasonHandlerError, 2}, {delivery.Ack, delivery.ReasonProcessed, 3}},
		"m-4":     {{delivery.DeadLetter, delivery.ReasonPermanent, 1}},
		slowFirst: {{delivery.Ack, delivery.ReasonProcessed, 1}},
		slowHeld:  held,
	}, got)
	mu.Lock()
	for id, n := range keyed {
		require.Len(t, got[id], n, "message %s: %d deliveries handed to the receiver, %d reported", id, n, len(got[id]))
	}
	mu.Unlock()
	require.Equal(t, dedup.ConsumerStats{Delivered: 8, Acked: 4, RetriedInPlace: uint64(2 + holds), DeadLettered: 2}, c.Stats())
	require.Equal(t, map[delivery.Reason]uint64{delivery.ReasonUndecodable: 1, delivery.ReasonPermanent: 1}, rcv.Stats().DeadLetters)

	require.Equal(t, "producer", tr.Link(spanOf["m-2"]), "the delivery's origin lacks the producer's traceparent")
	for _, d := range getAll(t, conn, top.DeadLetterQueue, 2) {
		require.Equal(t, spanOf[d.MessageId], d.Headers["traceparent"], "the dead letter of %s carries its delivery's trace context", d.MessageId)
	}
}

// TestRetryCopyCarriesTraceContext: a copy published to a retry tier
// carries the trace context of the delivery that failed (in place of the
// producer's), which the copy's own delivery then sees in its origin; the
// failed delivery is reported once, settled, as a retry with the tier's
// delay.
func TestRetryCopyCarriesTraceContext(t *testing.T) {
	t.Parallel()
	const tier = 300 * time.Millisecond
	url := testenv.RabbitMQ.Addr(t)
	top := declare(t, url, dedupamqp.Topology{RetryTiers: []time.Duration{tier}})
	conn := dial(t, url)
	var tr tracer
	var runs atomic.Int32
	cfg := fastConfig("tier-trace")
	cfg.Observer = &tr
	cfg.Backoff = dedup.BackoffFunc(func(int) time.Duration { return tier })
	store, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(store, idstrategy.MessageID[Order](),
		func(context.Context, *dedup.Message[Order]) (struct{}, error) {
			if runs.Add(1) == 1 {
				return struct{}{}, errors.New("gateway timeout")
			}
			return struct{}{}, nil
		}, cfg)
	require.NoError(t, err)
	opts := top.Options()
	opts.InPlaceRetryMax = 50 * time.Millisecond
	c, err := dedupamqp.NewConsumer(url, top.Queue, rcv, opts)
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)
	publishAll(t, conn, top.Queue, []amqp.Publishing{{MessageId: "m-1", Body: orderJSON(t, Order{ID: "o-1"}), Headers: amqp.Table{"traceparent": "producer"}}})

	eventually(t, "the copy processed", func() bool { return tr.Reasons()[delivery.ReasonProcessed] == 1 })
	require.NoError(t, c.Stop(t.Context()))
	events, spans, started := tr.Snapshot()
	require.Len(t, events, 2)
	require.Equal(t, 2, started)
	first := events[0]
	require.True(t, first.Settled)
	require.NoError(t, first.SettleErr)
	require.Equal(t, delivery.Retry, first.Decision.Action)
	require.Equal(t, delivery.ReasonHandlerError, first.Decision.Reason)
	require.Equal(t, tier, first.Decision.Delay, "the retry done: through the tier")
	require.Equal(t, "producer", tr.Link(spans[0]))
	require.Equal(t, spans[0], tr.Link(spans[1]), "the retry copy does not carry its failed delivery's trace context")
	require.Equal(t, dedup.ConsumerStats{Delivered: 2, Acked: 1, RetriedLater: 1}, c.Stats())
}

// TestPublisherInjectsTraceContext: a Publisher with an Injector writes
// the trace context of Publish's ctx into each message it publishes, in
// place of one the message had, without changing the caller's headers
// table; without an Injector, it adds none.
func TestPublisherInjectsTraceContext(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	top := declare(t, url, dedupamqp.Topology{})
	conn := dial(t, url)
	var tr tracer
	traced, err := dedupamqp.NewPublisher(conn, &dedupamqp.PublisherOptions{Injector: &tr})
	require.NoError(t, err)
	t.Cleanup(func() { _ = traced.Close(context.Background()) })
	plain, err := dedupamqp.NewPublisher(conn, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = plain.Close(context.Background()) })

	ctx := adaptertest.WithSpan(t.Context(), "span-producer")
	headers := amqp.Table{"traceparent": "old", "tenant": "acme"}
	_, err = traced.Publish(ctx, "", top.Queue, amqp.Publishing{MessageId: "m-1", Body: []byte(`{}`), Headers: headers})
	require.NoError(t, err)
	_, err = traced.Publish(ctx, "", top.Queue, amqp.Publishing{MessageId: "m-2", Body: []byte(`{}`)})
	require.NoError(t, err)
	_, err = plain.Publish(ctx, "", top.Queue, amqp.Publishing{MessageId: "m-3", Body: []byte(`{}`)})
	require.NoError(t, err)

	require.Equal(t, amqp.Table{"traceparent": "old", "tenant": "acme"}, headers, "the caller's headers were written over")
	got := getAll(t, conn, top.Queue, 3)
	require.Equal(t, "span-producer", got[0].Headers["traceparent"])
	require.Equal(t, "acme", got[0].Headers["tenant"])
	require.Equal(t, "span-producer", got[1].Headers["traceparent"])
	require.NotContains(t, got[2].Headers, "traceparent", "a Publisher without an Injector wrote a trace context")
}

// spanLogs is a slog.Handler that records each message logged with the
// span its context carried (as a trace-aware handler adds trace ids).
type spanLogs struct {
	mu    sync.Mutex
	spans map[string][]string // message -> spans
}

func (h *spanLogs) Enabled(context.Context, slog.Level) bool { return true }

func (h *spanLogs) Handle(ctx context.Context, r slog.Record) error {
	span, _ := adaptertest.SpanOf(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.spans[r.Message] = append(h.spans[r.Message], span)
	return nil
}

func (h *spanLogs) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *spanLogs) WithGroup(string) slog.Handler      { return h }

func (h *spanLogs) of(msg string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.spans[msg]...)
}

// TestLogsCarryDeliveryContext: what the Consumer logs about a delivery
// (a dead letter the broker returned, unroutable) is logged with that
// delivery's context, so that a trace-aware handler ties the line to the
// delivery's span; the delivery is reported with the dead letter's error.
func TestLogsCarryDeliveryContext(t *testing.T) {
	t.Parallel()
	const notPublished = "dedupamqp: dead letter not published; the message is requeued"
	url := testenv.RabbitMQ.Addr(t)
	top := declare(t, url, dedupamqp.Topology{})
	conn := dial(t, url)
	require.NoError(t, channel(t, conn).QueueUnbind(top.DeadLetterQueue, top.Queue, top.DeadLetterExchange, nil))
	var tr tracer
	logs := &spanLogs{spans: map[string][]string{}}
	cfg := fastConfig("logs")
	cfg.Observer = &tr
	store, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(store, idstrategy.MessageID[Order](),
		func(context.Context, *dedup.Message[Order]) (struct{}, error) { return struct{}{}, nil }, cfg)
	require.NoError(t, err)
	opts := top.Options()
	opts.InPlaceRetryMax = 50 * time.Millisecond
	opts.Logger = slog.New(logs)
	c, err := dedupamqp.NewConsumer(url, top.Queue, rcv, opts)
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)
	publishAll(t, conn, top.Queue, []amqp.Publishing{{MessageId: "m-1", Body: []byte("not json")}})

	eventually(t, "a dead letter returned and its delivery reported", func() bool {
		events, _, _ := tr.Snapshot()
		return len(events) >= 1 && len(logs.of(notPublished)) >= 1
	})
	require.NoError(t, c.Stop(t.Context()))
	events, spans, _ := tr.Snapshot()
	failed := map[string]bool{}
	for i, e := range events {
		if e.Decision.Reason == delivery.ReasonCanceled {
			continue // redelivered after Stop, returned unhandled
		}
		require.Equal(t, delivery.DeadLetter, e.Decision.Action)
		require.ErrorIs(t, e.SettleErr, dedupamqp.ErrDeadLetter)
		require.ErrorIs(t, e.SettleErr, dedupamqp.ErrReturned)
		failed[spans[i]] = true
	}
	lines := logs.of(notPublished)
	require.NotEmpty(t, lines)
	for _, span := range lines {
		require.True(t, failed[span], "logged under %q, not the context of a delivery whose dead letter failed", span)
	}
	st := c.Stats()
	require.Equal(t, st.SettleFailures, uint64(len(lines)), "each returned dead letter counted once")
	require.Zero(t, st.DeadLettered)
	require.Nil(t, rcv.Stats().DeadLetters, "a dead letter not published counted")
}

// TestHoldCutShortAtStop: a copy held in place (its key in flight in
// another delivery) when Stop comes is returned to the queue at once, and
// that try is reported once, as the retry it became; every try before it
// was reported once too.
func TestHoldCutShortAtStop(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	top := declare(t, url, dedupamqp.Topology{})
	conn := dial(t, url)
	var tr tracer
	release := make(chan struct{})
	cfg := fastConfig("cut")
	cfg.Observer = &tr
	cfg.NoWait = true
	store, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(store, idstrategy.BodyField("id", func(o Order) string { return o.ID }),
		func(ctx context.Context, _ *dedup.Message[Order]) (struct{}, error) {
			select {
			case <-release:
				return struct{}{}, nil
			case <-ctx.Done():
				return struct{}{}, ctx.Err()
			}
		}, cfg)
	require.NoError(t, err)
	opts := top.Options()
	opts.Concurrency = 2
	c, err := dedupamqp.NewConsumer(url, top.Queue, rcv, opts)
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)
	publishAll(t, conn, top.Queue, []amqp.Publishing{
		{MessageId: "m-1", Body: orderJSON(t, Order{ID: "o-1"})},
		{MessageId: "m-2", Body: orderJSON(t, Order{ID: "o-1"})},
	})
	eventually(t, "the copy held", func() bool { return tr.Reasons()[delivery.ReasonInFlight] >= 1 })
	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(t.Context()) }()
	eventually(t, "the held copy returned", func() bool { return depth(t, conn, top.Queue) == 1 })
	close(release)
	require.NoError(t, testenv.Recv(t, stopped, "Stop"))

	events, spans, started := tr.Snapshot()
	seen := map[string]bool{}
	var held []delivery.Event
	unhandled := 0 // the copy redelivered before the consumer was cancelled, returned unhandled
	for i, e := range events {
		if e.Decision.Reason == delivery.ReasonCanceled && spans[i] == "" {
			unhandled++
			continue
		}
		require.False(t, seen[spans[i]], "two events of one delivery: %s", spans[i])
		seen[spans[i]] = true
		require.True(t, e.Settled)
		require.NoError(t, e.SettleErr)
		if e.Decision.Reason == delivery.ReasonInFlight {
			held = append(held, e)
		} else {
			require.Equal(t, delivery.ReasonProcessed, e.Decision.Reason)
		}
	}
	require.Equal(t, started, len(events)-unhandled, "deliveries started and deliveries reported differ")
	require.Len(t, events, len(held)+1+unhandled)
	require.Equal(t, delivery.Retry, held[len(held)-1].Decision.Action)
	st := c.Stats()
	require.Equal(t, dedup.ConsumerStats{Delivered: uint64(2 + unhandled), Acked: 1, RetriedInPlace: uint64(len(held))}, st,
		"each try held and handed again, and the last one returned to the queue")
}
