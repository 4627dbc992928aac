package deduphttp_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	deduphttp "github.com/dedup-go/dedup/middleware/http"
)

// saga is a handler of two steps, charge and reserve, whose reserve fails
// (the handler answers 503), and the compensation of charge. What each
// did is counted.
type saga struct {
	runs, charges, reserves, refunds atomic.Int32
	// refundErr, when set, is the compensation's outcome at its nth run
	// (1 for the first): nil refunds.
	refundErr func(n int32) error
	// refunded is the charge the compensation got: the recorded result.
	refunded atomic.Pointer[string]
}

func (s *saga) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.runs.Add(1)
	ctx := r.Context()
	if _, err := dedup.Step(ctx, "charge", func(ctx context.Context) (string, error) {
		s.charges.Add(1)
		return "ch_" + r.Header.Get("X-Tenant"), ctx.Err()
	}); err != nil {
		http.Error(w, "charge failed", http.StatusInternalServerError)
		return
	}
	if _, err := dedup.Step(ctx, "reserve", func(ctx context.Context) (int, error) {
		s.reserves.Add(1)
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		return 0, errors.New("out of stock")
	}); err != nil {
		w.Header().Set("X-Handler", "yes")
		http.Error(w, "reserve failed", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

func (s *saga) config(maxAttempts int) *dedup.Config {
	return &dedup.Config{
		MaxAttempts: maxAttempts,
		Backoff:     dedup.BackoffFunc(func(n int) time.Duration { return time.Duration(n) * 2 * time.Second }),
		Compensations: dedup.Compensations{
			// The middleware's messages are its own: a compensation takes
			// any, and finds what it undoes in the step's result.
			"charge": dedup.Compensate(func(ctx context.Context, _ any, charge string) error {
				n := s.refunds.Add(1)
				if s.refundErr != nil {
					if err := s.refundErr(n); err != nil {
						return err
					}
				}
				s.refunded.Store(&charge)
				return ctx.Err()
			}),
		},
	}
}

// TestGivenUp: a key whose requests failed MaxAttempts times is given up
// in the request that hit the limit: the compensation of its completed
// step runs once, before that request's answer (the handler's 503) goes
// out; a later request with the key gets 422 attempts-exhausted without
// the handler running, and runs no compensation again.
func TestGivenUp(t *testing.T) {
	t.Parallel()
	var s saga
	m := newMiddleware(t, newMemstore(t), &deduphttp.Options{Config: s.config(3)})
	srv := serve(t, m.Wrap(&s))
	c := client(t)
	q := req{key: "k-1", tenant: "acme", body: `{"sku":"a"}`}

	for i := 1; i <= 3; i++ {
		r := do(t, c, srv, q)
		require.Equal(t, http.StatusServiceUnavailable, r.Status, "request %d: %s", i, r.Body)
		require.Equal(t, "reserve failed\n", string(r.Body), "request %d: the handler's answer", i)
		if i < 3 {
			require.Zero(t, s.refunds.Load(), "request %d: not given up before MaxAttempts", i)
		}
	}
	// Read when the third answer came: the compensation ran before it.
	require.EqualValues(t, 1, s.refunds.Load(), "the charge is refunded in the request that hit the limit")
	require.NotNil(t, s.refunded.Load())
	require.Equal(t, "ch_acme", *s.refunded.Load(), "the compensation got the step's recorded result")
	require.EqualValues(t, 1, s.charges.Load(), "the charge ran once: later requests replayed it")
	require.EqualValues(t, 3, s.reserves.Load())

	for i := range 2 {
		r := do(t, c, srv, q)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "later request %d: %s", i, r.Body)
		require.Equal(t, deduphttp.CodeAttemptsExhausted, r.problem(t).Code)
	}
	require.EqualValues(t, 3, s.runs.Load(), "the handler does not run for a key given up")
	require.EqualValues(t, 1, s.refunds.Load(), "the compensation runs once")
	require.EqualValues(t, 1, s.charges.Load())

	// Another key is untouched.
	r := do(t, c, srv, req{key: "k-2", tenant: "acme", body: `{"sku":"a"}`})
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Body)
	require.EqualValues(t, 2, s.charges.Load())
}

// TestGivenUpFoundLater: a key given up under one MaxAttempts, asked of
// a middleware whose MaxAttempts is higher (a deploy raised it), is found
// given up by the receiver (dedup.ErrGivenUp) rather than exhausted: it
// gets the same 422, and the handler does not run.
func TestGivenUpFoundLater(t *testing.T) {
	t.Parallel()
	var s saga
	st := newMemstore(t)
	c := client(t)
	q := req{key: "k-1", tenant: "acme", body: `{"sku":"a"}`}
	before := serve(t, newMiddleware(t, st, &deduphttp.Options{Config: s.config(2)}).Wrap(&s))
	for range 2 {
		require.Equal(t, http.StatusServiceUnavailable, do(t, c, before, q).Status)
	}
	require.EqualValues(t, 1, s.refunds.Load())
	exhausted := do(t, c, before, q)
	require.Equal(t, http.StatusUnprocessableEntity, exhausted.Status)

	after := serve(t, newMiddleware(t, st, &deduphttp.Options{Config: s.config(10)}).Wrap(&s))
	r := do(t, c, after, q)
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s", r.Body)
	require.Equal(t, deduphttp.CodeAttemptsExhausted, r.problem(t).Code)
	require.Equal(t, exhausted.Body, r.Body, "one answer for a key given up")
	require.EqualValues(t, 2, s.runs.Load(), "the handler does not run")
	require.EqualValues(t, 1, s.refunds.Load())
}

// TestCompensationFailed: a compensation that fails (a panic, an error)
// answers 503 idempotency-key-giving-up with the receiver's backoff as
// Retry-After, in place of the handler's own answer, and the
// compensations resume on the retry with the key, the handler never
// running again; once the failure is final (MaxAttempts failures) the
// answer is 422 attempts-exhausted, naming nothing internal, and a
// compensation that succeeds later gets the same.
func TestCompensationFailed(t *testing.T) {
	t.Parallel()
	s := saga{refundErr: func(n int32) error {
		switch n {
		case 1:
			panic("refund API down")
		case 2, 3:
			return fmt.Errorf("secret-internal refund error %d", n)
		}
		return nil
	}}
	m := newMiddleware(t, newMemstore(t), &deduphttp.Options{Config: s.config(3)})
	srv := serve(t, m.Wrap(&s))
	c := client(t)
	q := req{key: "k-1", tenant: "acme", body: `{"sku":"a"}`}

	for i := 1; i <= 2; i++ {
		r := do(t, c, srv, q)
		require.Equal(t, http.StatusServiceUnavailable, r.Status)
		require.Equal(t, "reserve failed\n", string(r.Body))
	}
	giveUp := func(retryAfter string, refunds int32) {
		t.Helper()
		r := do(t, c, srv, q)
		require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Body)
		require.Equal(t, deduphttp.CodeGivingUp, r.problem(t).Code)
		require.Equal(t, retryAfter, r.Header.Get("Retry-After"))
		require.Empty(t, r.Header.Get("X-Handler"), "the handler's answer is dropped")
		require.EqualValues(t, refunds, s.refunds.Load())
	}
	giveUp("2", 1) // the request that hit the limit: the compensation panicked
	giveUp("4", 2) // the retry: the compensations resume, and fail again

	final := do(t, c, srv, q) // the third failure is final
	require.Equal(t, http.StatusUnprocessableEntity, final.Status, "%s", final.Body)
	require.Equal(t, deduphttp.CodeAttemptsExhausted, final.problem(t).Code)
	require.EqualValues(t, 3, s.refunds.Load())
	require.Nil(t, s.refunded.Load())

	later := do(t, c, srv, q) // the compensation succeeds at last
	require.Equal(t, http.StatusUnprocessableEntity, later.Status, "%s", later.Body)
	require.Equal(t, final.Body, later.Body, "a final failure is answered as any key given up: nothing internal in it")
	require.EqualValues(t, 4, s.refunds.Load())
	require.NotNil(t, s.refunded.Load())

	r := do(t, c, srv, q)
	require.Equal(t, http.StatusUnprocessableEntity, r.Status)
	require.EqualValues(t, 4, s.refunds.Load(), "the compensations ran: none runs again")
	require.EqualValues(t, 3, s.runs.Load(), "the handler never ran after the limit")
	require.EqualValues(t, 1, s.charges.Load())
}
