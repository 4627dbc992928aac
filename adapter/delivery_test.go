package adapter_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

// TestSettledKeepsTheDeliveryOnTheStack pins that reporting a delivery
// costs no allocation of its own: Settled must not let the Delivery an
// adapter holds escape to the heap (544 bytes per message), so Deliver
// then Settled allocates what Deliver alone does. A duplicate is handed
// over, whose handling allocates the same every time. Not parallel:
// AllocsPerRun counts the whole process's allocations.
func TestSettledKeepsTheDeliveryOnTheStack(t *testing.T) {
	st, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(st, idstrategy.MessageID[order](),
		func(context.Context, *dedup.Message[order]) (struct{}, error) { return struct{}{}, nil }, nil)
	require.NoError(t, err)
	a := adapter.Bind(rcv)
	ctx := context.Background()
	m := &dedup.Message[order]{ID: "m-1", Broker: "mine", Source: "orders"}
	first := a.Deliver(ctx, m)
	first.Settled(adapter.Settlement{})
	require.Equal(t, delivery.StatusProcessed, first.Result.Status)

	var status delivery.Status
	deliverOnly := testing.AllocsPerRun(100, func() {
		d := a.Deliver(ctx, m)
		status = d.Result.Status
	})
	require.Equal(t, delivery.StatusDuplicate, status)
	settled := testing.AllocsPerRun(100, func() {
		d := a.Deliver(ctx, m)
		d.Settled(adapter.Settlement{})
	})
	require.Equal(t, deliverOnly, settled, "allocations of Deliver then Settled, beside Deliver alone")
}
