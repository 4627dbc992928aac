package dedup_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
)

// recorder is an Observer that starts each delivery with a value in its
// context (as a tracer starts a span) and records every event with the
// value its context carried.
type recorder struct {
	mu      sync.Mutex
	started []delivery.Origin
	events  []delivery.Event
	spans   []string
}

type spanKey struct{}

func (r *recorder) StartDelivery(ctx context.Context, o delivery.Origin) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started = append(r.started, o)
	return context.WithValue(ctx, spanKey{}, "span-"+o.MessageID)
}

func (r *recorder) Observe(ctx context.Context, e delivery.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	span, _ := ctx.Value(spanKey{}).(string)
	r.events = append(r.events, e)
	r.spans = append(r.spans, span)
}

func (r *recorder) snapshot() ([]delivery.Event, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery.Event(nil), r.events...), append([]string(nil), r.spans...)
}

type msg = *dedup.Message[order]

func envelope(id string, amount int) msg {
	return &dedup.Message[order]{Body: order{ID: id, Amount: amount}, ID: "m-" + id, Broker: "fake", Source: "orders",
		Stream: "ORDERS", Partition: 3, Offset: 42, DeliveryCount: 2, Header: delivery.MapHeader{"traceparent": {"00-abc"}}}
}

// newDeliveryReceiver returns a receiver of envelopes whose handler
// records the span its context carried, and fails orders with a negative
// amount for good.
func newDeliveryReceiver(t *testing.T, obs delivery.Observer, spans *[]string, mu *sync.Mutex) *dedup.Receiver[msg, string] {
	t.Helper()
	clk := clock.NewFake(epoch)
	rcv, err := dedup.NewReceiver(newMemstore(t, clk), func(m msg) (string, error) { return m.Body.ID, nil },
		func(ctx context.Context, m msg) (string, error) {
			span, _ := ctx.Value(spanKey{}).(string)
			mu.Lock()
			*spans = append(*spans, span)
			mu.Unlock()
			if m.Body.Amount < 0 {
				return "", dedup.Permanent(errors.New("declined"))
			}
			return "charged " + m.Body.ID, nil
		}, &dedup.Config{Namespace: "billing", Clock: clk, Observer: obs})
	require.NoError(t, err)
	return rcv
}

// TestDeliverySettledOnce: an adapter's delivery is reported once, when
// settled, with the message's origin, the receiver's answer and what the
// adapter did; the handler and the observer share the context
// StartDelivery returned; a dead letter the broker took is counted by
// reason.
func TestDeliverySettledOnce(t *testing.T) {
	t.Parallel()
	var rec recorder
	var mu sync.Mutex
	var handlerSpans []string
	rcv := newDeliveryReceiver(t, &rec, &handlerSpans, &mu)

	d := adapter.Bind(rcv).Deliver(t.Context(), envelope("o-1", 100))
	require.Equal(t, delivery.StatusProcessed, d.Result.Status)
	require.Equal(t, delivery.Ack, d.Decision.Action)
	events, _ := rec.snapshot()
	require.Empty(t, events, "nothing is reported before the adapter settled the delivery")
	d.Settled(adapter.Settlement{Err: errors.New("ack: channel closed")})
	d.Settled(adapter.Settlement{}) // once only

	poison := adapter.Bind(rcv).Deliver(t.Context(), envelope("o-2", -1))
	require.Equal(t, delivery.DeadLetter, poison.Decision.Action)
	poison.Settled(adapter.Settlement{})
	undecodable := adapter.Bind(rcv).Refused(t.Context(), envelope("o-3", 0), dedup.ErrUndecodable)
	require.Equal(t, delivery.ReasonUndecodable, undecodable.Decision.Reason)
	undecodable.Settled(adapter.Settlement{})
	lost := adapter.Bind(rcv).Deliver(t.Context(), envelope("o-4", -1))
	lost.Settled(adapter.Settlement{Err: errors.New("dead letter not confirmed")})

	events, spans := rec.snapshot()
	require.Len(t, events, 4)
	e := events[0]
	require.Equal(t, delivery.Origin{Broker: "fake", Source: "orders", Stream: "ORDERS", Partition: 3, Offset: 42, DeliveryCount: 2, MessageID: "m-o-1"},
		delivery.Origin{Broker: e.Broker, Source: e.Source, Stream: e.Stream, Partition: e.Partition, Offset: e.Offset, DeliveryCount: e.DeliveryCount, MessageID: e.MessageID})
	tp, ok := e.Header.Get("traceparent")
	require.True(t, ok)
	require.Equal(t, "00-abc", tp)
	require.Equal(t, "billing:o-1", e.Key)
	require.Equal(t, delivery.StatusProcessed, e.Status)
	require.True(t, e.Stored)
	require.True(t, e.Settled)
	require.EqualError(t, e.SettleErr, "ack: channel closed")
	require.Positive(t, e.HandlerDuration)
	require.Equal(t, delivery.ReasonPermanent, events[1].Decision.Reason)
	require.True(t, events[1].Settled)
	require.Equal(t, delivery.ReasonUndecodable, events[2].Decision.Reason)
	require.ErrorIs(t, events[2].Err, dedup.ErrUndecodable)
	require.Equal(t, []string{"span-m-o-1", "span-m-o-2", "span-m-o-3", "span-m-o-4"}, spans, "Observe gets the delivery's context")
	mu.Lock()
	require.Equal(t, []string{"span-m-o-1", "span-m-o-2", "span-m-o-4"}, handlerSpans, "the handler runs under the delivery's context")
	mu.Unlock()
	require.Equal(t, map[delivery.Reason]uint64{delivery.ReasonPermanent: 1, delivery.ReasonUndecodable: 1}, rcv.Stats().DeadLetters,
		"dead letters the broker took, by reason; not the one that failed")
}

// TestDeliverBatch: each message of a batch is its own delivery, started,
// handled under its own context and reported once when settled.
func TestDeliverBatch(t *testing.T) {
	t.Parallel()
	var rec recorder
	var mu sync.Mutex
	var handlerSpans []string
	rcv := newDeliveryReceiver(t, &rec, &handlerSpans, &mu)

	ds := adapter.Bind(rcv).DeliverBatch(t.Context(), []msg{envelope("o-1", 1), envelope("o-2", 2), envelope("o-1", 1)})
	require.Len(t, ds, 3)
	require.Equal(t, delivery.StatusDuplicate, ds[2].Result.Status)
	for i := range ds {
		ds[i].Settled(adapter.Settlement{})
	}
	events, spans := rec.snapshot()
	require.Len(t, events, 3)
	require.Equal(t, []string{"span-m-o-1", "span-m-o-2", "span-m-o-1"}, spans)
	mu.Lock()
	require.Equal(t, []string{"span-m-o-1", "span-m-o-2"}, handlerSpans)
	mu.Unlock()

	// HandleBatch reports at once, one event per message.
	out := rcv.HandleBatch(t.Context(), []msg{envelope("o-5", 5), envelope("o-6", 6)})
	require.Len(t, out, 2)
	events, _ = rec.snapshot()
	require.Len(t, events, 5)
	require.False(t, events[4].Settled)
}

// TestDeliverWithoutObserver: Deliver and Settled work without an
// Observer, and still count dead letters.
func TestDeliverWithoutObserver(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var spans []string
	rcv := newDeliveryReceiver(t, nil, &spans, &mu)
	d := adapter.Bind(rcv).Deliver(t.Context(), envelope("o-1", -1))
	require.Equal(t, delivery.DeadLetter, d.Decision.Action)
	d.Settled(adapter.Settlement{})
	require.Equal(t, map[delivery.Reason]uint64{delivery.ReasonPermanent: 1}, rcv.Stats().DeadLetters)
	require.Equal(t, t.Context(), d.Context())
}

// quietObserver records nothing by its own account; it fails the test if
// called, and injects a fixed trace context.
type quietObserver struct{ t *testing.T }

func (q quietObserver) Quiet() bool { return true }
func (q quietObserver) Observe(context.Context, delivery.Event) {
	q.t.Error("a quiet Observer was called")
}
func (q quietObserver) Inject(_ context.Context, set func(k, v string)) {
	set("traceparent", "00-quiet")
}

// TestQuietObserverCostsNothing: an Observer that says it records nothing
// is never called (a delivery pays nothing for it), and its Injector
// ability still writes the trace context.
func TestQuietObserverCostsNothing(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var spans []string
	rcv := newDeliveryReceiver(t, quietObserver{t}, &spans, &mu)
	_, _ = rcv.Handle(t.Context(), envelope("o-1", 1))
	d := adapter.Bind(rcv).Deliver(t.Context(), envelope("o-1", 1))
	d.Settled(adapter.Settlement{})
	got := map[string]string{}
	adapter.Bind(rcv).Inject(t.Context(), func(k, v string) { got[k] = v })
	require.Equal(t, map[string]string{"traceparent": "00-quiet"}, got)
}
