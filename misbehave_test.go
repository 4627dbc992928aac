package dedup_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
)

// nonsenseStore answers every Acquire with a fixed claim.
type nonsenseStore struct {
	store.Store
	claim store.Claim
}

func (s *nonsenseStore) Acquire(context.Context, store.AcquireRequest) (store.Claim, error) {
	return s.claim, nil
}

// TestMisbehavingStore: a store that answers what the contract rules out is
// unavailable, retried after StoreRetryDelay, never a hot loop of 0s
// in-flight retries and never a handler run without a real claim.
func TestMisbehavingStore(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	tests := map[string]store.Claim{
		"acquired with a zero token":      {Acquired: true, Record: store.Record{State: store.StateProcessing, Attempt: 1}},
		"refused in an unknown state":     {Record: store.Record{State: store.State(9)}},
		"refused by a failed record":      {Record: store.Record{State: store.StateFailed}},
		"refused by a lease already over": {Record: store.Record{State: store.StateProcessing, LeaseUntil: epoch.Add(-time.Second)}},
		"refused without a lease":         {Record: store.Record{State: store.StateProcessing}},
	}
	for name, claim := range tests {
		t.Run(name, func(t *testing.T) {
			var calls atomic.Int64
			rcv := newReceiver(t, &nonsenseStore{Store: newMemstore(t, clk), claim: claim}, func(ctx context.Context, o order) (string, error) {
				calls.Add(1)
				return "", nil
			}, &dedup.Config{Clock: clk, StoreRetryDelay: 3 * time.Second})
			res, err := rcv.Handle(t.Context(), order{ID: "o-1"})
			require.ErrorIs(t, err, dedup.ErrStoreUnavailable)
			require.Contains(t, err.Error(), "the store answered")
			d := adapter.Bind(rcv).Decide(res, err)
			require.Equal(t, delivery.Retry, d.Action)
			require.Equal(t, 3*time.Second, d.Delay)
			require.Zero(t, calls.Load())
		})
	}
}

// lateStore refuses every claim by a lease that is live when asked and
// ends while its answer travels: it moves the clock past the lease before
// it answers.
type lateStore struct {
	store.Store
	clk *clock.Fake
}

func (s *lateStore) refusal() store.Claim {
	c := store.Claim{Record: store.Record{State: store.StateProcessing, Attempt: 1, LeaseUntil: s.clk.Now().Add(10 * time.Millisecond)}}
	s.clk.Advance(20 * time.Millisecond)
	return c
}

func (s *lateStore) Acquire(context.Context, store.AcquireRequest) (store.Claim, error) {
	return s.refusal(), nil
}

func (s *lateStore) AcquireBatch(_ context.Context, reqs []store.AcquireRequest) []store.AcquireOutcome {
	out := make([]store.AcquireOutcome, len(reqs))
	c := s.refusal()
	for i := range out {
		out[i].Claim = c
	}
	return out
}

func (s *lateStore) CompleteBatch(ctx context.Context, reqs []store.CompleteRequest) []error {
	return make([]error, len(reqs))
}

func (s *lateStore) ExtendBatch(ctx context.Context, reqs []store.ExtendRequest) []error {
	return make([]error, len(reqs))
}

// TestLeaseEndingDuringAcquire: a lease that was live when the claim was
// asked for and ended before the answer arrived is a delivery in flight,
// looked at again after one first wait (200 ms), not a store breaking the contract (which would be
// refused as unavailable, and under fail-open run the handler beside the
// holder's), in Handle and HandleBatch alike.
func TestLeaseEndingDuringAcquire(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	var calls atomic.Int64
	rcv := newReceiver(t, &lateStore{Store: newMemstore(t, clk), clk: clk}, func(ctx context.Context, o order) (string, error) {
		calls.Add(1)
		return "", nil
	}, &dedup.Config{Clock: clk, FailOpen: true})
	res, err := rcv.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusInFlight, res.Status)
	require.Positive(t, res.RetryAfter)
	require.LessOrEqual(t, res.RetryAfter, 200*time.Millisecond, "no more than a first wait, however late")
	d := adapter.Bind(rcv).Decide(res, err)
	require.Equal(t, delivery.Retry, d.Action)
	require.Equal(t, delivery.ReasonInFlight, d.Reason)

	for _, o := range rcv.HandleBatch(t.Context(), []order{{ID: "o-2"}, {ID: "o-3"}}) {
		require.NoError(t, o.Err)
		require.Equal(t, delivery.StatusInFlight, o.Result.Status)
	}
	require.Zero(t, calls.Load(), "no handler ran beside the holder's")
}
