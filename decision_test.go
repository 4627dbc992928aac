package dedup_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
)

// decider returns a receiver whose Decide uses 3 attempts, a backoff of
// attempt seconds and a store retry delay of 9s.
func decider(t *testing.T, backoff dedup.Backoff) *dedup.Receiver[order, string] {
	t.Helper()
	return newReceiver(t, newMemstore(t, clock.NewFake(epoch)), func(context.Context, order) (string, error) { return "", nil }, &dedup.Config{
		MaxAttempts:     3,
		Backoff:         backoff,
		StoreRetryDelay: 9 * time.Second,
	})
}

func secondsBackoff(n int) time.Duration { return time.Duration(n) * time.Second }

func TestDecide(t *testing.T) {
	t.Parallel()
	rcv := decider(t, dedup.BackoffFunc(secondsBackoff))
	handlerErr := func(attempt int, err error) error {
		return &dedup.HandlerError{Key: "ns:k", Attempt: attempt, Err: err}
	}
	boom := errors.New("boom")
	notStored := fmt.Errorf("%w: too big", dedup.ErrResultNotStored)
	undecodable := fmt.Errorf("%w: bad", dedup.ErrResultUndecodable)
	ownDeadline := fmt.Errorf("charge: %w", context.DeadlineExceeded)
	tests := []struct {
		name    string
		res     dedup.Result[string]
		err     error
		action  delivery.Action
		delay   time.Duration
		reason  delivery.Reason
		wantErr error // Decision.Err; the err argument when nil
	}{
		{"processed", dedup.Result[string]{Status: delivery.StatusProcessed}, nil, delivery.Ack, 0, delivery.ReasonProcessed, nil},
		{"duplicate", dedup.Result[string]{Status: delivery.StatusDuplicate}, nil, delivery.Ack, 0, delivery.ReasonDuplicate, nil},
		{"bypassed", dedup.Result[string]{Status: delivery.StatusBypassed}, nil, delivery.Ack, 0, delivery.ReasonBypassed, nil},
		{"processed, result not stored", dedup.Result[string]{Status: delivery.StatusProcessed, Problem: notStored},
			nil, delivery.Ack, 0, delivery.ReasonNotStored, notStored},
		{"duplicate, stored result undecodable", dedup.Result[string]{Status: delivery.StatusDuplicate, Problem: undecodable},
			nil, delivery.Ack, 0, delivery.ReasonDuplicate, undecodable},
		{"in flight", dedup.Result[string]{Status: delivery.StatusInFlight, RetryAfter: 12 * time.Second}, nil,
			delivery.Retry, 12 * time.Second, delivery.ReasonInFlight, nil},
		{"handler error, first attempt", dedup.Result[string]{Attempt: 1}, handlerErr(1, boom), delivery.Retry, time.Second, delivery.ReasonHandlerError, nil},
		{"handler error, second attempt", dedup.Result[string]{Attempt: 2}, handlerErr(2, boom), delivery.Retry, 2 * time.Second, delivery.ReasonHandlerError, nil},
		{"handler error, last attempt", dedup.Result[string]{Attempt: 3}, handlerErr(3, boom), delivery.DeadLetter, 0, delivery.ReasonAttemptsExhausted, nil},
		{"handler's own deadline, second attempt", dedup.Result[string]{Attempt: 2}, handlerErr(2, ownDeadline), delivery.Retry, 2 * time.Second, delivery.ReasonHandlerError, nil},
		{"handler's own deadline, last attempt", dedup.Result[string]{Attempt: 3}, handlerErr(3, ownDeadline), delivery.DeadLetter, 0, delivery.ReasonAttemptsExhausted, nil},
		{"permanent", dedup.Result[string]{Attempt: 1}, handlerErr(1, dedup.Permanent(boom)), delivery.DeadLetter, 0, delivery.ReasonPermanent, nil},
		{"attempts exhausted on claim", dedup.Result[string]{Attempt: 4}, fmt.Errorf("%w: k", dedup.ErrAttemptsExhausted), delivery.DeadLetter, 0, delivery.ReasonAttemptsExhausted, nil},
		{"no key", dedup.Result[string]{}, fmt.Errorf("%w: empty", dedup.ErrNoKey), delivery.DeadLetter, 0, delivery.ReasonNoKey, nil},
		{"invalid key", dedup.Result[string]{}, fmt.Errorf("%w: long", dedup.ErrInvalidKey), delivery.DeadLetter, 0, delivery.ReasonInvalidKey, nil},
		{"undecodable", dedup.Result[string]{}, fmt.Errorf("%w: bad json", dedup.ErrUndecodable), delivery.DeadLetter, 0, delivery.ReasonUndecodable, nil},
		{"key reused", dedup.Result[string]{}, fmt.Errorf("%w: k", dedup.ErrKeyReused), delivery.DeadLetter, 0, delivery.ReasonKeyReused, nil},
		{"store unavailable", dedup.Result[string]{}, &store.OpError{Op: "acquire", Err: boom}, delivery.Retry, 9 * time.Second, delivery.ReasonStoreUnavailable, nil},
		{"shutdown", dedup.Result[string]{Attempt: 3}, fmt.Errorf("%w: %w", dedup.ErrCanceled, handlerErr(3, context.Canceled)), delivery.Retry, time.Second, delivery.ReasonCanceled, nil},
		{"lease lost under the handler", dedup.Result[string]{Attempt: 3}, handlerErr(3, fmt.Errorf("%w: %w", dedup.ErrLeaseLost, context.Canceled)), delivery.Retry, time.Second, delivery.ReasonInFlight, nil},
		{"adapter's own wait cancelled", dedup.Result[string]{}, fmt.Errorf("fetch: %w", context.Canceled), delivery.Retry, time.Second, delivery.ReasonCanceled, nil},
		{"bypassed handler error", dedup.Result[string]{}, handlerErr(0, boom), delivery.Retry, time.Second, delivery.ReasonHandlerError, nil},
		{"compensation failed, second time", dedup.Result[string]{Attempt: 3}, &dedup.CompensationError{Key: "k", Step: "charge", Failures: 2, Err: boom}, delivery.Retry, 2 * time.Second, delivery.ReasonHandlerError, nil},
		{"compensation failed for good", dedup.Result[string]{Attempt: 3}, &dedup.CompensationError{Key: "k", Step: "charge", Failures: 3, Final: true, Err: boom}, delivery.DeadLetter, 0, delivery.ReasonCompensationFailed, nil},
		{"given up earlier", dedup.Result[string]{Attempt: 4}, &dedup.GivenUpError{Key: "k", Reason: delivery.ReasonAttemptsExhausted, Cause: "boom"}, delivery.DeadLetter, 0, delivery.ReasonAttemptsExhausted, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := adapter.Bind(rcv).Decide(tt.res, tt.err)
			require.Equal(t, tt.action, d.Action, d)
			require.Equal(t, tt.delay, d.Delay)
			require.Equal(t, tt.reason, d.Reason)
			require.Equal(t, cmp.Or(tt.wantErr, tt.err), d.Err)
		})
	}
}

func TestDecideDefaults(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, newMemstore(t, clock.NewFake(epoch)), func(context.Context, order) (string, error) { return "", nil }, nil)
	d := adapter.Bind(rcv).Decide(dedup.Result[string]{}, &store.OpError{Op: "acquire", Err: errors.New("down")})
	require.Equal(t, delivery.Retry, d.Action)
	require.Equal(t, (5 * time.Second), d.Delay)

	d = adapter.Bind(rcv).Decide(dedup.Result[string]{Attempt: 5}, &dedup.HandlerError{Attempt: 5, Err: errors.New("x")})
	require.Equal(t, delivery.DeadLetter, d.Action)
}

// TestDecideBadBackoff: a Backoff that panics or answers a negative delay
// gets the default's answer, never a crash or a negative delay.
func TestDecideBadBackoff(t *testing.T) {
	t.Parallel()
	err := &dedup.HandlerError{Key: "ns:k", Attempt: 1, Err: errors.New("boom")}
	for name, b := range map[string]dedup.Backoff{
		"panics":   dedup.BackoffFunc(func(int) time.Duration { panic("backoff bug") }),
		"negative": dedup.BackoffFunc(func(int) time.Duration { return -time.Hour }),
	} {
		t.Run(name, func(t *testing.T) {
			rcv := decider(t, b)
			var d delivery.Decision
			require.NotPanics(t, func() { d = adapter.Bind(rcv).Decide(dedup.Result[string]{Attempt: 1}, err) })
			require.Equal(t, delivery.Retry, d.Action)
			require.GreaterOrEqual(t, d.Delay, 800*time.Millisecond, "the default backoff's first delay")
		})
	}
}

func TestExponentialBackoff(t *testing.T) {
	t.Parallel()
	b := dedup.ExponentialBackoff{Base: time.Second, Max: 10 * time.Second}
	for attempt, base := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 50: 10 * time.Second} {
		for range 20 {
			d := b.Delay(attempt)
			require.LessOrEqual(t, d, base, "attempt %d: never more than its step, nor than Max", attempt)
			require.GreaterOrEqual(t, d, base-base/5, "attempt %d: at most 20%% jitter", attempt)
		}
	}
}

func TestErrorMatching(t *testing.T) {
	t.Parallel()
	se := &store.OpError{Op: "acquire", Key: "k", Err: context.DeadlineExceeded}
	wrapped := fmt.Errorf("consumer: %w", se)
	require.ErrorIs(t, wrapped, dedup.ErrStoreUnavailable)
	require.ErrorIs(t, wrapped, context.DeadlineExceeded)
	var got *store.OpError
	require.ErrorAs(t, wrapped, &got)
	require.Same(t, se, got)

	boom := errors.New("boom")
	he := &dedup.HandlerError{Key: "k", Attempt: 2, Err: dedup.Permanent(boom)}
	require.ErrorIs(t, he, boom)
	require.True(t, dedup.IsPermanent(fmt.Errorf("x: %w", he)))
	require.False(t, dedup.IsPermanent(boom))
	require.NoError(t, dedup.Permanent(nil))
	require.Equal(t, boom.Error(), dedup.Permanent(boom).Error())
}
