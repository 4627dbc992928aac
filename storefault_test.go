package dedup_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// TestStoreFailingInsideTheHandler: a handler whose error is the store's
// (its connection broke inside the transaction the record completes in)
// reports the store unavailable, not a handler failure: Decide retries it
// after StoreRetryDelay and the failure counts as a store error.
func TestStoreFailingInsideTheHandler(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	rcv := newReceiver(t, newMemstore(t, clk), func(ctx context.Context, o order) (string, error) {
		return "", fmt.Errorf("insert payment: %w", &store.OpError{Op: "commit", Key: o.ID, Err: errConnRefused})
	}, &dedup.Config{Clock: clk, MaxAttempts: 1})

	_, err := rcv.Handle(t.Context(), order{ID: "o-1"})
	require.ErrorIs(t, err, dedup.ErrStoreUnavailable)
	var he *dedup.HandlerError
	require.False(t, errors.As(err, &he), "not the handler's failure: %v", err)
	d := adapter.Bind(rcv).Decide(dedup.Result[string]{Attempt: 1}, err)
	require.Equal(t, delivery.Retry, d.Action, "never dead-lettered for attempts")
	require.Equal(t, delivery.ReasonStoreUnavailable, d.Reason)
	require.Equal(t, uint64(1), rcv.Stats().StoreErrors)
	require.Zero(t, rcv.Stats().HandlerErrors)
}

// misconfiguredStore answers every claim as a store that is reachable but
// cannot serve (a table or a right missing).
type misconfiguredStore struct{ plainStore }

func (misconfiguredStore) Acquire(context.Context, store.AcquireRequest) (store.Claim, error) {
	return store.Claim{}, fmt.Errorf("%w: table dedup_records does not exist", store.ErrInvalidConfig)
}

// TestMisconfiguredStore: a store that reports itself misconfigured at run
// time is neither an outage run through under FailOpen nor a handler
// failure: the handler does not run, the refusal is logged at error level,
// and Decide retries after StoreRetryDelay with its own reason.
func TestMisconfiguredStore(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	var logs bytes.Buffer
	var runs atomic.Int64
	rcv := newReceiver(t, misconfiguredStore{plainStore{newMemstore(t, clk)}}, func(ctx context.Context, o order) (string, error) {
		runs.Add(1)
		return "", nil
	}, &dedup.Config{Clock: clk, FailOpen: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})

	res, err := rcv.Handle(t.Context(), order{ID: "o-1"})
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)
	require.NotErrorIs(t, err, dedup.ErrStoreUnavailable)
	require.Zero(t, runs.Load(), "fail-open does not run through a misconfigured store")
	d := adapter.Bind(rcv).Decide(res, err)
	require.Equal(t, delivery.Retry, d.Action)
	require.Equal(t, delivery.ReasonStoreMisconfigured, d.Reason)
	require.Equal(t, (5 * time.Second), d.Delay)
	require.Contains(t, logs.String(), "level=ERROR")
	require.Contains(t, logs.String(), "store misconfigured")
	require.Equal(t, uint64(1), rcv.Stats().StoreErrors)
}
