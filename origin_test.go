package dedup_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
)

// consumerOrigin is what an adapter knows of its consumer and no message
// carries.
func consumerOrigin(o delivery.Origin) delivery.Origin {
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
	ctx := adapter.WithOrigin(t.Context(), consumerOrigin)

	d := adapter.Bind(rcv).Deliver(ctx, envelope("o-1", 100))
	d.Settled(adapter.Settlement{})
	d = adapter.Bind(rcv).Refused(ctx, envelope("o-2", 0), dedup.ErrUndecodable)
	d.Settled(adapter.Settlement{})
	for _, d := range adapter.Bind(rcv).DeliverBatch(ctx, []msg{envelope("o-3", 1)}) {
		d.Settled(adapter.Settlement{})
	}
	_, err := rcv.Handle(ctx, envelope("o-4", 1))
	require.NoError(t, err)
	e := delivery.Event{Origin: envelope("o-5", 1).Origin(), Decision: delivery.Decision{Action: delivery.Retry, Reason: delivery.ReasonCanceled}, Settled: true}
	adapter.Bind(rcv).Observe(ctx, e)

	want := delivery.Origin{Broker: "fake", Source: "orders", Stream: "ORDERS", Partition: 3, Offset: 42, DeliveryCount: 2,
		DestinationTemplate: "orders.*", ConsumerGroup: "billing", ServerAddress: "nats.example", ServerPort: 4222}
	events, _ := rec.snapshot()
	require.Len(t, events, 5)
	rec.mu.Lock()
	started := append([]delivery.Origin(nil), rec.started...)
	rec.mu.Unlock()
	require.Len(t, started, 4, "every delivery but the one reported with Observe is started")
	for i, o := range append(started, originsOf(events)...) {
		require.Equal(t, "m-o-", o.MessageID[:4], "the message's own origin is kept (%d)", i)
		o.MessageID, o.Header = "", nil
		require.Equal(t, want, o, "origin %d", i)
	}

	var order []string
	nested := adapter.WithOrigin(adapter.WithOrigin(t.Context(), func(o delivery.Origin) delivery.Origin {
		order = append(order, "outer")
		o.ConsumerGroup, o.ServerPort = "outer", 1
		return o
	}), func(o delivery.Origin) delivery.Origin {
		order = append(order, "inner")
		o.ConsumerGroup = "inner"
		return o
	})
	require.Equal(t, t.Context(), adapter.WithOrigin(t.Context(), nil), "a nil fill adds nothing")
	d = adapter.Bind(rcv).Deliver(nested, envelope("o-6", 1))
	d.Settled(adapter.Settlement{})
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
	ctx := adapter.WithOrigin(t.Context(), func(o delivery.Origin) delivery.Origin { called = true; return o })
	d := adapter.Bind(rcv).Deliver(ctx, envelope("o-1", 1))
	d.Settled(adapter.Settlement{})
	adapter.Bind(rcv).Observe(ctx, delivery.Event{})
	require.Equal(t, delivery.StatusProcessed, d.Result.Status)
	require.False(t, called)
}

func originsOf(events []delivery.Event) []delivery.Origin {
	out := make([]delivery.Origin, len(events))
	for i, e := range events {
		out[i] = e.Origin
	}
	return out
}
