package dedup_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
)

// TestHandleBatch: a batch with duplicates inside it and of earlier
// messages, a failing message and a message without a key gives, per
// message, what Handle gives, and each effect happens once.
func TestHandleBatch(t *testing.T) {
	t.Parallel()
	for _, batching := range []bool{true, false} {
		t.Run(fmt.Sprintf("batch store %v", batching), func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(epoch)
			var st store.Store = newMemstore(t, clk)
			if !batching {
				st = &faultyStore{Store: st}
			}
			_, isBatch := st.(store.BatchStore)
			require.Equal(t, batching, isBatch)
			effects := map[string]int{}
			var calls atomic.Int64
			rcv := newReceiver(t, st, func(ctx context.Context, o order) (string, error) {
				calls.Add(1)
				if o.ID == "bad" {
					return "", errTransient
				}
				effects[o.ID]++
				return "r-" + o.ID, nil
			}, &dedup.Config{Clock: clk})

			_, err := rcv.Handle(t.Context(), order{ID: "old"})
			require.NoError(t, err)

			msgs := []order{{ID: "a"}, {ID: "b"}, {ID: "a"}, {ID: "old"}, {ID: "bad"}, {ID: ""}, {ID: "c"}, {ID: "b"}}
			out := rcv.HandleBatch(t.Context(), msgs)
			require.Len(t, out, len(msgs))
			want := []struct {
				status delivery.Status
				value  string
				action delivery.Action
			}{
				{delivery.StatusProcessed, "r-a", delivery.Ack},
				{delivery.StatusProcessed, "r-b", delivery.Ack},
				{delivery.StatusDuplicate, "r-a", delivery.Ack},
				{delivery.StatusDuplicate, "r-old", delivery.Ack},
				{delivery.StatusNone, "", delivery.Retry},
				{delivery.StatusNone, "", delivery.DeadLetter},
				{delivery.StatusProcessed, "r-c", delivery.Ack},
				{delivery.StatusDuplicate, "r-b", delivery.Ack},
			}
			for i, w := range want {
				require.Equal(t, w.status, out[i].Result.Status, "message %d (%s)", i, msgs[i].ID)
				require.Equal(t, w.value, out[i].Result.Value, "message %d", i)
				require.Equal(t, w.action, adapter.Bind(rcv).Decide(out[i].Result, out[i].Err).Action, "message %d", i)
			}
			require.Equal(t, map[string]int{"old": 1, "a": 1, "b": 1, "c": 1}, effects)

			// The batch's records answer later single deliveries.
			for _, id := range []string{"a", "b", "c"} {
				res, err := rcv.Handle(t.Context(), order{ID: id})
				require.NoError(t, err)
				require.Equal(t, delivery.StatusDuplicate, res.Status)
				require.Equal(t, "r-"+id, res.Value)
			}
			res, err := rcv.Handle(t.Context(), order{ID: "bad"})
			require.ErrorIs(t, err, errTransient)
			require.Equal(t, 2, res.Attempt, "the failed batch item was released as failed")
		})
	}
}

func TestHandleBatchStoreDown(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	st := newMemstore(t, clk)
	var calls atomic.Int64
	h := func(ctx context.Context, o order) (string, error) { calls.Add(1); return "ok", nil }
	rcv := newReceiver(t, &downBatchStore{st}, h, &dedup.Config{Clock: clk})
	out := rcv.HandleBatch(t.Context(), []order{{ID: "a"}, {ID: "b"}})
	for _, o := range out {
		require.ErrorIs(t, o.Err, dedup.ErrStoreUnavailable)
		require.Equal(t, delivery.Retry, adapter.Bind(rcv).Decide(o.Result, o.Err).Action)
	}
	require.Zero(t, calls.Load())

	open := newReceiver(t, &downBatchStore{st}, h, &dedup.Config{Clock: clk, FailOpen: true})
	out = open.HandleBatch(t.Context(), []order{{ID: "a"}, {ID: "b"}})
	for _, o := range out {
		require.NoError(t, o.Err)
		require.Equal(t, delivery.StatusBypassed, o.Result.Status)
	}
	require.Equal(t, int64(2), calls.Load())
}

// downBatchStore is a batch store whose server is unreachable.
type downBatchStore struct{ store.BatchStore }

func (s *downBatchStore) AcquireBatch(ctx context.Context, reqs []store.AcquireRequest) []store.AcquireOutcome {
	out := make([]store.AcquireOutcome, len(reqs))
	for i := range out {
		out[i].Err = errConnRefused
	}
	return out
}

// TestHandleBatchHeartbeatHoldsWaitingClaims: while the first handler of a
// batch runs for two leases, the heartbeat keeps every claim of the batch,
// including the ones still waiting their turn.
func TestHandleBatchHeartbeatHoldsWaitingClaims(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	st := newMemstore(t, clk)
	cfg := &dedup.Config{Clock: clk, Lease: testLease}
	other := newReceiver(t, st, func(ctx context.Context, o order) (string, error) { return "other", nil }, cfg)
	var waiting []delivery.Status
	rcv := newReceiver(t, st, func(ctx context.Context, o order) (string, error) {
		if o.ID == "slow" {
			for range 6 { // two leases, in steps of a third
				clk.Advance(testLease / 3)
				res, err := other.Handle(ctx, order{ID: "waiting"})
				require.NoError(t, err)
				waiting = append(waiting, res.Status)
			}
		}
		return "batch " + o.ID, nil
	}, cfg)

	out := rcv.HandleBatch(t.Context(), []order{{ID: "slow"}, {ID: "waiting"}})
	for i, o := range out {
		require.NoError(t, o.Err)
		require.Equal(t, delivery.StatusProcessed, o.Result.Status, "message %d", i)
		require.Equal(t, 1, o.Result.Attempt, "message %d kept its first claim", i)
	}
	require.Equal(t, "batch waiting", out[1].Result.Value)
	require.Len(t, waiting, 6)
	for _, s := range waiting {
		require.Equal(t, delivery.StatusInFlight, s, "the waiting claim was never taken over")
	}
	require.Zero(t, clk.Pending(), "the batch heartbeat is stopped")
}

// TestHandleBatchKeyReusedInsideBatch: a later message of a key with another
// payload than the batch's first is ErrKeyReused, never the first's result.
func TestHandleBatchKeyReusedInsideBatch(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	rcv, err := dedup.NewReceiver(newMemstore(t, clock.NewFake(epoch)),
		func(o signedOrder) (string, error) { return o.ID, nil },
		func(ctx context.Context, o signedOrder) (int, error) { calls.Add(1); return o.Amount, nil }, nil)
	require.NoError(t, err)

	out := rcv.HandleBatch(t.Context(), []signedOrder{{"o-1", 10}, {"o-1", 99}, {"o-1", 10}})
	require.NoError(t, out[0].Err)
	require.Equal(t, delivery.StatusProcessed, out[0].Result.Status)
	require.ErrorIs(t, out[1].Err, dedup.ErrKeyReused)
	require.Equal(t, delivery.DeadLetter, adapter.Bind(rcv).Decide(out[1].Result, out[1].Err).Action)
	require.NoError(t, out[2].Err)
	require.Equal(t, delivery.StatusDuplicate, out[2].Result.Status)
	require.Equal(t, 10, out[2].Result.Value)
	require.Equal(t, int64(1), calls.Load())
}
