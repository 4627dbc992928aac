//go:build !race

package dedup_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store/memstore"
)

// TestWithOriginAllocatesNothing: completing a delivery's Origin costs no
// allocation: an observed duplicate answered from memory allocates
// nothing under WithOrigin's context (an Origin handed to the fill by
// pointer escaped: 160 B a delivery, with or without a fill). Not under
// the race detector, which allocates.
func TestWithOriginAllocatesNothing(t *testing.T) {
	var filled int
	obs := delivery.ObserverFunc(func(_ context.Context, e delivery.Event) {
		if e.ConsumerGroup == "billing" {
			filled++
		}
	})
	st, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(st, func(m msg) (string, error) { return m.Body.ID, nil },
		func(ctx context.Context, m msg) (struct{}, error) { return struct{}{}, ctx.Err() },
		&dedup.Config{Namespace: "billing", Observer: obs})
	require.NoError(t, err)
	m := envelope("o-1", 1)
	_, err = rcv.Handle(t.Context(), m)
	require.NoError(t, err)
	for name, ctx := range map[string]context.Context{
		"without": context.Background(), "with": adapter.WithOrigin(context.Background(), consumerOrigin),
	} {
		allocs := testing.AllocsPerRun(100, func() {
			if res, _ := rcv.Handle(ctx, m); res.Status != delivery.StatusDuplicate {
				t.Fatalf("status %v", res.Status)
			}
		})
		require.Zero(t, allocs, "%s WithOrigin", name)
	}
	require.Positive(t, filled, "the fill ran")
}
