package dedup_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
)

// consumerOrigin is what an adapter knows of its consumer and no message
// carries.
func consumerOrigin(o dedup.Origin) dedup.Origin {
	o.ServerAddress, o.ServerPort, o.ConsumerGroup, o.DestinationTemplate = "nats.example", 4222, "billing", "orders.*"
	return o
}

// TestWithOriginCompletesEveryDelivery: under WithOrigin's context, the
// Origin StartDelivery gets and the event's carry what the fill adds, on
// top of the message's own, for Deliver, Refused, DeliverBatch, Handle and
// an event an adapter reports with Observe. Nested fills both run, the
// outer first.
func TestWithOriginCompletesEveryDelivery(t *testing.T) {
	t.Parallel()
	var rec recorder
	var mu sync.Mutex
	var handlerSpans []string
	rcv := newDeliveryReceiver(t, &rec, &handlerSpans, &mu)
	ctx := dedup.WithOrigin(t.Context(), consumerOrigin)

	d := rcv.Deliver(ctx, envelope("o-1", 100))
	d.Settled(dedup.Settlement{})
	d = rcv.Refused(ctx, envelope("o-2", 0), dedup.ErrUndecodable)
	d.Settled(dedup.Settlement{})
	for _, d := range rcv.DeliverBatch(ctx, []msg{envelope("o-3", 1)}) {
		d.Settled(dedup.Settlement{})
	}
	_, err := rcv.Handle(ctx, envelope("o-4", 1))
	require.NoError(t, err)
	e := dedup.Event{Origin: envelope("o-5", 1).Origin(), Decision: dedup.Decision{Action: dedup.Retry, Reason: dedup.ReasonCanceled}, Settled: true}
	rcv.Observe(ctx, e)

	want := dedup.Origin{Broker: "fake", Source: "orders", Stream: "ORDERS", Partition: 3, Offset: 42, DeliveryCount: 2,
		DestinationTemplate: "orders.*", ConsumerGroup: "billing", ServerAddress: "nats.example", ServerPort: 4222}
	events, _ := rec.snapshot()
	require.Len(t, events, 5)
	rec.mu.Lock()
	started := append([]dedup.Origin(nil), rec.started...)
	rec.mu.Unlock()
	require.Len(t, started, 4, "every delivery but the one reported with Observe is started")
	for i, o := range append(started, originsOf(events)...) {
		require.Equal(t, "m-o-", o.MessageID[:4], "the message's own origin is kept (%d)", i)
		o.MessageID, o.Header = "", nil
		require.Equal(t, want, o, "origin %d", i)
	}

	var order []string
	nested := dedup.WithOrigin(dedup.WithOrigin(t.Context(), func(o dedup.Origin) dedup.Origin {
		order = append(order, "outer")
		o.ConsumerGroup, o.ServerPort = "outer", 1
		return o
	}), func(o dedup.Origin) dedup.Origin {
		order = append(order, "inner")
		o.ConsumerGroup = "inner"
		return o
	})
	require.Equal(t, t.Context(), dedup.WithOrigin(t.Context(), nil), "a nil fill adds nothing")
	d = rcv.Deliver(nested, envelope("o-6", 1))
	d.Settled(dedup.Settlement{})
	events, _ = rec.snapshot()
	require.Equal(t, []string{"outer", "inner"}, order)
	require.Equal(t, "inner", events[5].ConsumerGroup)
	require.Equal(t, 1, events[5].ServerPort)
}

// TestWithOriginWithoutObserver: a receiver without an Observer never
// calls the fill: it costs such a delivery nothing.
func TestWithOriginWithoutObserver(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var handlerSpans []string
	rcv := newDeliveryReceiver(t, nil, &handlerSpans, &mu)
	called := false
	ctx := dedup.WithOrigin(t.Context(), func(o dedup.Origin) dedup.Origin { called = true; return o })
	d := rcv.Deliver(ctx, envelope("o-1", 1))
	d.Settled(dedup.Settlement{})
	rcv.Observe(ctx, dedup.Event{})
	require.Equal(t, dedup.StatusProcessed, d.Result.Status)
	require.False(t, called)
}

func originsOf(events []dedup.Event) []dedup.Origin {
	out := make([]dedup.Origin, len(events))
	for i, e := range events {
		out[i] = e.Origin
	}
	return out
}
