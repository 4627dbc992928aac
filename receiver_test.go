package dedup_test

import (
	"context"
	"errors"
	"fmt"
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

type receipt struct {
	OrderID string
	Charge  int
}

func TestHandleProcessesOnceAndReplays(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	var calls atomic.Int64
	rcv := newReceiver(t, newMemstore(t, clk), func(ctx context.Context, o order) (receipt, error) {
		n := calls.Add(1)
		return receipt{OrderID: o.ID, Charge: int(n) * 100}, nil
	}, &dedup.Config{Namespace: "billing", Clock: clk})
	ctx := context.Background()

	res, err := rcv.Handle(ctx, order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)
	require.Equal(t, receipt{"o-1", 100}, res.Value)
	require.Equal(t, "billing:o-1", res.Key)
	require.Equal(t, 1, res.Attempt)

	dup, err := rcv.Handle(ctx, order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusDuplicate, dup.Status)
	require.Equal(t, res.Value, dup.Value, "a duplicate gets the first result")
	require.Equal(t, int64(1), calls.Load())
	require.Equal(t, delivery.Ack, adapter.Bind(rcv).Decide(dup, err).Action)

	st := rcv.Stats()
	require.Equal(t, uint64(1), st.Processed)
	require.Equal(t, uint64(1), st.Duplicates)
}

// TestDuplicateWithoutResult: a duplicate of a handler that returns
// nothing (answered without decoding a result) has the record's key and
// attempt, and is counted.
func TestDuplicateWithoutResult(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	var calls atomic.Int64
	rcv := newReceiver(t, newMemstore(t, clk), func(ctx context.Context, o order) (struct{}, error) {
		calls.Add(1)
		return struct{}{}, ctx.Err()
	}, &dedup.Config{Namespace: "billing", Clock: clk})
	for range 3 {
		_, err := rcv.Handle(t.Context(), order{ID: "o-1"})
		require.NoError(t, err)
	}
	dup, err := rcv.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, dedup.Result[struct{}]{Status: delivery.StatusDuplicate, Key: "billing:o-1", Attempt: 1}, dup)
	require.Equal(t, int64(1), calls.Load())
	st := rcv.Stats()
	require.Equal(t, uint64(1), st.Processed)
	require.Equal(t, uint64(3), st.Duplicates)
}

func TestNamespacesDoNotShareRecords(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	st := newMemstore(t, clk)
	var calls atomic.Int64
	h := func(ctx context.Context, o order) (int64, error) { return calls.Add(1), nil }
	billing := newReceiver(t, st, h, &dedup.Config{Namespace: "billing", Clock: clk})
	shipping := newReceiver(t, st, h, &dedup.Config{Namespace: "shipping", Clock: clk})

	a, err := billing.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	b, err := shipping.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, a.Status)
	require.Equal(t, delivery.StatusProcessed, b.Status, "another service's record must not answer")
	require.Equal(t, int64(2), calls.Load())
}

func TestTransientFailureThenSuccess(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	var calls atomic.Int64
	rcv := newReceiver(t, newMemstore(t, clk), func(ctx context.Context, o order) (string, error) {
		if calls.Add(1) == 1 {
			return "", errTransient
		}
		return "charged " + o.ID, nil
	}, &dedup.Config{Clock: clk, Backoff: dedup.BackoffFunc(func(n int) time.Duration { return time.Duration(n) * time.Second })})

	res, err := rcv.Handle(t.Context(), order{ID: "o-1"})
	require.ErrorIs(t, err, errTransient)
	var he *dedup.HandlerError
	require.ErrorAs(t, err, &he)
	require.Equal(t, 1, he.Attempt)
	require.Equal(t, delivery.StatusNone, res.Status)
	d := adapter.Bind(rcv).Decide(res, err)
	require.Equal(t, delivery.Retry, d.Action)
	require.Equal(t, time.Second, d.Delay)
	require.Equal(t, delivery.ReasonHandlerError, d.Reason)

	res, err = rcv.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)
	require.Equal(t, 2, res.Attempt)
	require.Equal(t, "charged o-1", res.Value)

	res, err = rcv.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusDuplicate, res.Status)
	require.Equal(t, "charged o-1", res.Value)
	require.Equal(t, int64(2), calls.Load())
}

func TestPermanentFailureDeadLetters(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	errCard := errors.New("card declined")
	rcv := newReceiver(t, newMemstore(t, clk), func(ctx context.Context, o order) (string, error) {
		return "", dedup.Permanent(fmt.Errorf("charge %s: %w", o.ID, errCard))
	}, &dedup.Config{Clock: clk})

	res, err := rcv.Handle(t.Context(), order{ID: "o-1"})
	require.ErrorIs(t, err, errCard)
	require.True(t, dedup.IsPermanent(err))
	d := adapter.Bind(rcv).Decide(res, err)
	require.Equal(t, delivery.DeadLetter, d.Action)
	require.Equal(t, delivery.ReasonPermanent, d.Reason)
}

func TestAttemptsExhaustedDeadLetters(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	var calls atomic.Int64
	rcv := newReceiver(t, newMemstore(t, clk), func(ctx context.Context, o order) (string, error) {
		calls.Add(1)
		return "", errTransient
	}, &dedup.Config{Clock: clk, MaxAttempts: 3})

	for attempt := 1; attempt <= 3; attempt++ {
		res, err := rcv.Handle(t.Context(), order{ID: "o-1"})
		require.ErrorIs(t, err, errTransient)
		d := adapter.Bind(rcv).Decide(res, err)
		if attempt < 3 {
			require.Equal(t, delivery.Retry, d.Action, "attempt %d", attempt)
		} else {
			require.Equal(t, delivery.DeadLetter, d.Action)
			require.Equal(t, delivery.ReasonAttemptsExhausted, d.Reason)
		}
	}
	// A redelivery past the limit (a redriven dead letter, or a crash loop)
	// does not run the handler again.
	res, err := rcv.Handle(t.Context(), order{ID: "o-1"})
	require.ErrorIs(t, err, dedup.ErrAttemptsExhausted)
	require.Contains(t, err.Error(), errTransient.Error(), "the last error is reported")
	require.Equal(t, delivery.DeadLetter, adapter.Bind(rcv).Decide(res, err).Action)
	require.Equal(t, int64(3), calls.Load())
}

func TestPanicIsRecoveredAndReleased(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	var calls atomic.Int64
	rcv := newReceiver(t, newMemstore(t, clk), func(ctx context.Context, o order) (string, error) {
		if calls.Add(1) == 1 {
			var m map[string]int
			//lint:ignore SA5000 on purpose: the handler fails with a runtime error, as a buggy handler does, and the receiver must recover it
			m["boom"]++ // nil map write
		}
		return "ok", nil
	}, &dedup.Config{Clock: clk})

	res, err := rcv.Handle(t.Context(), order{ID: "o-1"})
	var pe *dedup.PanicError
	require.ErrorAs(t, err, &pe)
	require.Contains(t, string(pe.Stack), "receiver_test.go", "the stack points at the handler")
	require.Equal(t, delivery.Retry, adapter.Bind(rcv).Decide(res, err).Action)

	res, err = rcv.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)
	require.Equal(t, 2, res.Attempt)
}

// signedOrder carries a fingerprint of its payload.
type signedOrder struct {
	ID     string
	Amount int
}

func (o signedOrder) Fingerprint() (string, error) { return fmt.Sprintf("amount=%d", o.Amount), nil }

func TestFingerprintMismatchIsKeyReused(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	var calls atomic.Int64
	rcv, err := dedup.NewReceiver(newMemstore(t, clk), func(o signedOrder) (string, error) { return o.ID, nil },
		func(ctx context.Context, o signedOrder) (int, error) { calls.Add(1); return o.Amount, nil },
		&dedup.Config{Clock: clk})
	require.NoError(t, err)

	res, err := rcv.Handle(t.Context(), signedOrder{ID: "o-1", Amount: 10})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)

	res, err = rcv.Handle(t.Context(), signedOrder{ID: "o-1", Amount: 10})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusDuplicate, res.Status)

	res, err = rcv.Handle(t.Context(), signedOrder{ID: "o-1", Amount: 99})
	require.ErrorIs(t, err, dedup.ErrKeyReused)
	require.NotEqual(t, delivery.StatusDuplicate, res.Status, "never replay someone else's result")
	d := adapter.Bind(rcv).Decide(res, err)
	require.Equal(t, delivery.DeadLetter, d.Action)
	require.Equal(t, delivery.ReasonKeyReused, d.Reason)
	require.Equal(t, int64(1), calls.Load())
}

func TestStoreDownFailClosed(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	st := &faultyStore{Store: newMemstore(t, clk)}
	var calls atomic.Int64
	rcv := newReceiver(t, st, func(ctx context.Context, o order) (string, error) {
		calls.Add(1)
		return "ok", nil
	}, &dedup.Config{Clock: clk, StoreRetryDelay: 7 * time.Second})

	st.down.Store(true)
	for i := range 5 {
		res, err := rcv.Handle(t.Context(), order{ID: fmt.Sprint("o-", i)})
		require.ErrorIs(t, err, dedup.ErrStoreUnavailable)
		var se *store.OpError
		require.ErrorAs(t, err, &se)
		require.Equal(t, "acquire", se.Op)
		require.ErrorIs(t, err, errConnRefused.errno, "the store's own error stays reachable")
		d := adapter.Bind(rcv).Decide(res, err)
		require.Equal(t, delivery.Retry, d.Action)
		require.Equal(t, 7*time.Second, d.Delay)
		require.Equal(t, delivery.ReasonStoreUnavailable, d.Reason)
	}
	require.Zero(t, calls.Load(), "fail-closed: the handler never runs unprotected")

	st.down.Store(false)
	for i := range 5 {
		res, err := rcv.Handle(t.Context(), order{ID: fmt.Sprint("o-", i)})
		require.NoError(t, err)
		require.Equal(t, delivery.StatusProcessed, res.Status)
	}
	require.Equal(t, int64(5), calls.Load())
	require.Equal(t, uint64(5), rcv.Stats().StoreErrors)
}

func TestStoreDownFailOpen(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	st := &faultyStore{Store: newMemstore(t, clk)}
	var calls atomic.Int64
	rcv := newReceiver(t, st, func(ctx context.Context, o order) (string, error) {
		calls.Add(1)
		return "ok " + o.ID, nil
	}, &dedup.Config{Clock: clk, FailOpen: true})

	st.down.Store(true)
	res, err := rcv.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusBypassed, res.Status)
	require.Equal(t, "ok o-1", res.Value)
	d := adapter.Bind(rcv).Decide(res, err)
	require.Equal(t, delivery.Ack, d.Action)
	require.Equal(t, delivery.ReasonBypassed, d.Reason)
	require.Equal(t, int64(1), calls.Load())
	require.Equal(t, uint64(1), rcv.Stats().Bypassed)
}

func TestCancelledContextStillCompletes(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	ctx, cancel := context.WithCancel(t.Context())
	var calls atomic.Int64
	rcv := newReceiver(t, newMemstore(t, clk), func(ctx context.Context, o order) (string, error) {
		calls.Add(1)
		cancel() // shutdown starts after the effect happened
		return "charged", nil
	}, &dedup.Config{Clock: clk})

	res, err := rcv.Handle(ctx, order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)

	res, err = rcv.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusDuplicate, res.Status, "the completion was recorded despite the cancelled context")
	require.Equal(t, int64(1), calls.Load())
}
