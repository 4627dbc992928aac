package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	policy := dedup.Policy{
		MaxAttempts:     3,
		Backoff:         func(n int) time.Duration { return time.Duration(n) * time.Second },
		StoreRetryDelay: 9 * time.Second,
	}
	handlerErr := func(attempt int, err error) error {
		return &dedup.HandlerError{Key: "ns:k", Attempt: attempt, Err: err}
	}
	boom := errors.New("boom")
	tests := []struct {
		name   string
		res    dedup.Result[string]
		err    error
		action dedup.Action
		delay  time.Duration
		reason dedup.Reason
	}{
		{"processed", dedup.Result[string]{Status: dedup.StatusProcessed}, nil, dedup.Ack, 0, dedup.ReasonProcessed},
		{"duplicate", dedup.Result[string]{Status: dedup.StatusDuplicate}, nil, dedup.Ack, 0, dedup.ReasonDuplicate},
		{"bypassed", dedup.Result[string]{Status: dedup.StatusBypassed}, nil, dedup.Ack, 0, dedup.ReasonBypassed},
		{"processed, result not stored", dedup.Result[string]{Status: dedup.StatusProcessed},
			fmt.Errorf("%w: too big", dedup.ErrResultNotStored), dedup.Ack, 0, dedup.ReasonNotStored},
		{"processed, completion failed", dedup.Result[string]{Status: dedup.StatusProcessed},
			&dedup.StoreError{Op: "complete", Err: boom}, dedup.Ack, 0, dedup.ReasonNotStored},
		{"in flight", dedup.Result[string]{Status: dedup.StatusInFlight, RetryAfter: 12 * time.Second}, nil,
			dedup.Retry, 12 * time.Second, dedup.ReasonInFlight},
		{"handler error, first attempt", dedup.Result[string]{Attempt: 1}, handlerErr(1, boom), dedup.Retry, time.Second, dedup.ReasonHandlerError},
		{"handler error, second attempt", dedup.Result[string]{Attempt: 2}, handlerErr(2, boom), dedup.Retry, 2 * time.Second, dedup.ReasonHandlerError},
		{"handler error, last attempt", dedup.Result[string]{Attempt: 3}, handlerErr(3, boom), dedup.DeadLetter, 0, dedup.ReasonAttemptsExhausted},
		{"permanent", dedup.Result[string]{Attempt: 1}, handlerErr(1, dedup.Permanent(boom)), dedup.DeadLetter, 0, dedup.ReasonPermanent},
		{"attempts exhausted on claim", dedup.Result[string]{Attempt: 4}, fmt.Errorf("%w: k", dedup.ErrAttemptsExhausted), dedup.DeadLetter, 0, dedup.ReasonAttemptsExhausted},
		{"no key", dedup.Result[string]{}, fmt.Errorf("%w: empty", dedup.ErrNoKey), dedup.DeadLetter, 0, dedup.ReasonNoKey},
		{"invalid key", dedup.Result[string]{}, fmt.Errorf("%w: long", dedup.ErrInvalidKey), dedup.DeadLetter, 0, dedup.ReasonInvalidKey},
		{"undecodable", dedup.Result[string]{}, fmt.Errorf("%w: bad json", dedup.ErrUndecodable), dedup.DeadLetter, 0, dedup.ReasonUndecodable},
		{"key reused", dedup.Result[string]{}, fmt.Errorf("%w: k", dedup.ErrKeyReused), dedup.DeadLetter, 0, dedup.ReasonKeyReused},
		{"store unavailable", dedup.Result[string]{}, &dedup.StoreError{Op: "acquire", Err: boom}, dedup.Retry, 9 * time.Second, dedup.ReasonStoreUnavailable},
		{"cancelled", dedup.Result[string]{}, fmt.Errorf("acquire: %w", context.Canceled), dedup.Retry, time.Second, dedup.ReasonCancelled},
		{"bypassed handler error", dedup.Result[string]{}, handlerErr(0, boom), dedup.Retry, time.Second, dedup.ReasonHandlerError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := dedup.Decide(tt.res, tt.err, policy)
			require.Equal(t, tt.action, d.Action, d)
			require.Equal(t, tt.delay, d.Delay)
			require.Equal(t, tt.reason, d.Reason)
			require.Equal(t, tt.err, d.Err)
		})
	}
}

func TestDecideZeroPolicyUsesDefaults(t *testing.T) {
	t.Parallel()
	d := dedup.Decide(dedup.Result[int]{}, &dedup.StoreError{Op: "acquire", Err: errors.New("down")}, dedup.Policy{})
	require.Equal(t, dedup.Retry, d.Action)
	require.Equal(t, dedup.DefaultStoreRetryDelay, d.Delay)

	d = dedup.Decide(dedup.Result[int]{Attempt: dedup.DefaultMaxAttempts}, &dedup.HandlerError{Attempt: dedup.DefaultMaxAttempts, Err: errors.New("x")}, dedup.Policy{})
	require.Equal(t, dedup.DeadLetter, d.Action)
}

func TestExponentialBackoff(t *testing.T) {
	t.Parallel()
	b := dedup.ExponentialBackoff(time.Second, 10*time.Second)
	for attempt, base := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 50: 10 * time.Second} {
		for range 20 {
			d := b(attempt)
			require.GreaterOrEqual(t, d, base, "attempt %d", attempt)
			require.LessOrEqual(t, d, base+base/5, "attempt %d: at most 20%% jitter", attempt)
		}
	}
}

func TestErrorMatching(t *testing.T) {
	t.Parallel()
	se := &dedup.StoreError{Op: "acquire", Key: "k", Err: context.DeadlineExceeded}
	wrapped := fmt.Errorf("consumer: %w", se)
	require.ErrorIs(t, wrapped, dedup.ErrStoreUnavailable)
	require.ErrorIs(t, wrapped, context.DeadlineExceeded)
	var got *dedup.StoreError
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
