package dedup_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store"
)

// outgoingRun is what one run of a handler derived: the ids of its two
// outgoing messages, and the claim's attempt.
type outgoingRun struct {
	attempt            int
	captured, receipt  string
	capturedErr, other error
}

// TestOutgoingIDStableAcrossRuns: a handler that runs again for the same
// message derives the same outgoing ids, whether it ran again after its
// own failure (attempt 2) or after a lease that ran out was taken over by
// another receiver of the same namespace; a receiver of another namespace
// derives other ids for the same message.
func TestOutgoingIDStableAcrossRuns(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	st := newMemstore(t, clk)
	var runs []outgoingRun
	handler := func(fail bool) dedup.Handler[order, string] {
		return func(ctx context.Context, o order) (string, error) {
			held, ok := store.ClaimFromContext(ctx)
			require.True(t, ok)
			var r outgoingRun
			r.attempt = held.Attempt
			r.captured, r.capturedErr = dedup.OutgoingID(ctx, "payment-captured")
			r.receipt, r.other = dedup.OutgoingID(ctx, "receipt")
			runs = append(runs, r)
			if fail {
				return "", errors.New("the broker refused the publish")
			}
			return "ok", nil
		}
	}
	cfg := func(ns string) *dedup.Config {
		return &dedup.Config{Namespace: ns, Clock: clk, Lease: time.Minute,
			Backoff: dedup.BackoffFunc(func(int) time.Duration { return 0 })}
	}
	ctx := t.Context()
	o := order{ID: "o-1"}

	// Attempt 1 fails, attempt 2 runs again.
	failing := newReceiver(t, st, handler(true), cfg("billing"))
	_, err := failing.Handle(ctx, o)
	require.Error(t, err)
	// Attempt 3 is left without an outcome: the process "dies" while it
	// holds the lease (the handler blocks until the lease is over).
	stuck := make(chan struct{})
	dying := newReceiver(t, st, func(ctx context.Context, o order) (string, error) {
		r := outgoingRun{}
		held, _ := store.ClaimFromContext(ctx)
		r.attempt = held.Attempt
		r.captured, r.capturedErr = dedup.OutgoingID(ctx, "payment-captured")
		r.receipt, r.other = dedup.OutgoingID(ctx, "receipt")
		runs = append(runs, r)
		close(stuck)
		<-ctx.Done()
		return "", ctx.Err()
	}, &dedup.Config{Namespace: "billing", Clock: clk, Lease: time.Minute, StoreTimeout: time.Second})
	dyingCtx, die := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = dying.Handle(dyingCtx, o)
	}()
	<-stuck
	clk.Advance(2 * time.Minute) // the lease ran out without a heartbeat's extension confirmed
	die()
	<-done
	// Another receiver takes the key over and completes it.
	ok := newReceiver(t, st, handler(false), cfg("billing"))
	res, err := ok.Handle(ctx, o)
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)

	require.GreaterOrEqual(t, len(runs), 3)
	first := runs[0]
	require.NoError(t, first.capturedErr)
	require.NoError(t, first.other)
	require.Equal(t, outbox.MessageID("billing:o-1", "payment-captured"), first.captured)
	require.NotEqual(t, first.captured, first.receipt, "two names, two ids")
	attempts := map[int]bool{}
	for _, r := range runs {
		attempts[r.attempt] = true
		require.Equal(t, first.captured, r.captured, "attempt %d derived another id", r.attempt)
		require.Equal(t, first.receipt, r.receipt, "attempt %d derived another id", r.attempt)
	}
	require.Len(t, attempts, len(runs), "each run was a claim of its own")

	// Another namespace: effects of its own, ids of its own.
	runs = nil
	other := newReceiver(t, st, handler(false), cfg("shipping"))
	_, err = other.Handle(ctx, o)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.NotEqual(t, first.captured, runs[0].captured)
	require.Equal(t, outbox.MessageID("shipping:o-1", "payment-captured"), runs[0].captured)
}

// TestOutgoingIDOutsideHandler: no claim, no id; an empty name is refused.
func TestOutgoingIDOutsideHandler(t *testing.T) {
	t.Parallel()
	_, err := dedup.OutgoingID(t.Context(), "x")
	require.ErrorIs(t, err, dedup.ErrNoClaim)

	rcv := newReceiver(t, newMemstore(t, clock.NewFake(epoch)), func(ctx context.Context, o order) (string, error) {
		_, err := dedup.OutgoingID(ctx, "")
		return "", err
	}, &dedup.Config{Namespace: "n", Clock: clock.NewFake(epoch)})
	_, err = rcv.Handle(t.Context(), order{ID: "o"})
	require.ErrorIs(t, err, dedup.ErrInvalidKey)
}
