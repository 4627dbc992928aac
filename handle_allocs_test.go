//go:build !race

package dedup_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
)

// TestNewMessageAllocations: a new message through Handle allocates its
// key and its handler's context, and nothing more when the message is a
// *dedup.Message, whose Heartbeat the receiver keeps (a method value of it
// was a third allocation). Not under the race detector, which allocates.
func TestNewMessageAllocations(t *testing.T) {
	const runs = 100
	ids := make([]string, runs+1)
	for i := range ids {
		ids[i] = "o-" + strconv.Itoa(i)
	}
	plain := newReceiver(t, newMemstore(t, clock.Real()), func(ctx context.Context, o order) (struct{}, error) { return struct{}{}, ctx.Err() }, nil)
	wrapped, err := dedup.NewReceiver(newMemstore(t, clock.Real()), func(m msg) (string, error) { return m.Body.ID, nil },
		func(ctx context.Context, m msg) (struct{}, error) { return struct{}{}, ctx.Err() }, nil)
	require.NoError(t, err)
	msgs := make([]msg, len(ids))
	for i, id := range ids {
		msgs[i] = envelope(id, 1)
	}
	ctx := context.Background()
	var i, j int
	orders := testing.AllocsPerRun(runs, func() {
		if res, err := plain.Handle(ctx, order{ID: ids[i]}); err != nil || res.Status != delivery.StatusProcessed {
			t.Fatalf("status %v, %v", res.Status, err)
		}
		i++
	})
	envelopes := testing.AllocsPerRun(runs, func() {
		if res, err := wrapped.Handle(ctx, msgs[j]); err != nil || res.Status != delivery.StatusProcessed {
			t.Fatalf("status %v, %v", res.Status, err)
		}
		j++
	})
	require.LessOrEqual(t, orders, 2.0, "a new message: its key and its handler's context")
	require.Equal(t, orders, envelopes, "a *dedup.Message allocates what a plain message does")
}

// TestHandlerContextSize: the handler's context, allocated for every new
// message, fits the 96-byte size class; at 104 bytes it took the 112-byte
// class, and a new message through Handle over memstore cost about 8% more
// (docs/performance.md). A field added to it, or to store.HeldClaim, which
// it holds, must win that back.
func TestHandlerContextSize(t *testing.T) {
	require.LessOrEqual(t, dedup.HandlerContextSize, uintptr(96))
}
