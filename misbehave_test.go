package dedup_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/clock"
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
			d := rcv.Decide(res, err)
			require.Equal(t, dedup.Retry, d.Action)
			require.Equal(t, 3*time.Second, d.Delay)
			require.Zero(t, calls.Load())
		})
	}
}
