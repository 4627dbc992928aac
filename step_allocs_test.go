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

// TestStepAllocations bounds what recorded steps allocate over memstore:
// per step its result's encoding, its record's value and the store's copy
// of it, and once per run the run's state; a step's record never makes the
// handler's context build its cancellable part (three allocations more,
// which it once did). Not under the race detector, which allocates.
func TestStepAllocations(t *testing.T) {
	const runs = 100
	ids := make([]string, 3*runs+3)
	for i := range ids {
		ids[i] = "o-" + strconv.Itoa(i)
	}
	names := []string{"a", "b", "c"}
	steps := func(ctx context.Context, o order) (int, error) {
		sum := 0
		for _, n := range names {
			v, err := dedup.Step(ctx, n, func(context.Context) (int, error) { return o.Amount, nil })
			if err != nil {
				return 0, err
			}
			sum += v
		}
		return sum, ctx.Err()
	}
	plain := func(ctx context.Context, o order) (int, error) { return 3 * o.Amount, ctx.Err() }
	withSteps := newReceiver(t, newMemstore(t, clock.Real()), steps, &dedup.Config{Steps: true})
	without := newReceiver(t, newMemstore(t, clock.Real()), plain, &dedup.Config{Steps: true})
	noConfig := newReceiver(t, newMemstore(t, clock.Real()), plain, nil)
	ctx := context.Background()
	i := 0
	handle := func(rcv *dedup.Receiver[order, int]) func() {
		return func() {
			if res, err := rcv.Handle(ctx, order{ID: ids[i], Amount: 1}); err != nil || res.Status != delivery.StatusProcessed || res.Value != 3 {
				t.Fatalf("status %v, value %d, %v", res.Status, res.Value, err)
			}
			i++
		}
	}
	a := testing.AllocsPerRun(runs, handle(withSteps))
	b := testing.AllocsPerRun(runs, handle(without))
	c := testing.AllocsPerRun(runs, handle(noConfig))
	require.Equal(t, c, b, "Config.Steps costs a handler that runs no step nothing")
	require.LessOrEqual(t, a-b, 21.0, "three steps: at most 6 allocations each, and 3 for the run")
}
