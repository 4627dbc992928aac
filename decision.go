package dedup

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/dedup-go/dedup/delivery"
)

// decide maps an outcome of Handle to an action (adapter.Receiver.Decide), with this receiver's
// MaxAttempts, Backoff and StoreRetryDelay:
//
//	processed, duplicate, bypassed                       Ack (reason result-not-stored when Result.Problem is set)
//	in flight elsewhere                                  Retry after Result.RetryAfter (200 ms, doubling up to the remaining lease)
//	handler error, attempts left                         Retry with backoff
//	permanent error, attempts exhausted, no key,
//	invalid key, undecodable body, key reused            DeadLetter with the reason
//	store unavailable (fail-closed)                      Retry after StoreRetryDelay
//	store misconfigured (ErrInvalidConfig: a table or    Retry after StoreRetryDelay: nothing is lost
//	a right missing)                                     while an operator fixes it
//	a step's compensation failed (CompensationError)     Retry with backoff; once Final, DeadLetter (compensation-failed)
//	given up earlier, steps compensated (GivenUpError)   DeadLetter with the reason it was first given up for
//	caller's context ended (shutdown): ErrCanceled       Retry with the first backoff
//	handler cancelled because its lease was lost         Retry with the first backoff (in flight elsewhere)
//
// A handler that fails with its own deadline (context.DeadlineExceeded of a
// context it made) is a handler error like any other: it backs off and
// counts towards MaxAttempts. Only the end of the caller's context means
// "not processed".
func (r *Receiver[M, R]) decide(res Result[R], err error) delivery.Decision {
	if res.Status.Done() {
		d := delivery.Decision{Action: delivery.Ack, Reason: delivery.ReasonProcessed}
		switch {
		case res.Problem != nil && !errors.Is(res.Problem, ErrResultUndecodable):
			d.Reason, d.Err = delivery.ReasonNotStored, res.Problem
		case res.Status == delivery.StatusDuplicate:
			d.Reason, d.Err = delivery.ReasonDuplicate, res.Problem
		case res.Status == delivery.StatusBypassed:
			d.Reason = delivery.ReasonBypassed
		}
		return d
	}
	if err == nil {
		if res.Status == delivery.StatusInFlight {
			return delivery.Decision{Action: delivery.Retry, Delay: res.RetryAfter, Reason: delivery.ReasonInFlight}
		}
		// StatusNone without an error does not come from Handle; retrying is
		// the answer that loses nothing.
		return delivery.Decision{Action: delivery.Retry, Delay: r.backoff(1), Reason: delivery.ReasonHandlerError}
	}

	dead := func(reason delivery.Reason) delivery.Decision {
		return delivery.Decision{Action: delivery.DeadLetter, Reason: reason, Err: err}
	}
	var (
		compErr *CompensationError
		givenUp *GivenUpError
	)
	switch {
	case errors.Is(err, ErrCanceled):
		return delivery.Decision{Action: delivery.Retry, Delay: r.backoff(1), Reason: delivery.ReasonCanceled, Err: err}
	case errors.As(err, &compErr):
		if compErr.Final {
			return dead(delivery.ReasonCompensationFailed)
		}
		return delivery.Decision{Action: delivery.Retry, Delay: r.backoff(compErr.Failures), Reason: delivery.ReasonHandlerError, Err: err}
	case errors.As(err, &givenUp):
		return dead(cmp.Or(givenUp.Reason, delivery.ReasonPermanent))
	case errors.Is(err, ErrLeaseLost):
		// Another delivery holds the key now: its outcome decides.
		return delivery.Decision{Action: delivery.Retry, Delay: r.backoff(1), Reason: delivery.ReasonInFlight, Err: err}
	case errors.Is(err, ErrNoKey):
		return dead(delivery.ReasonNoKey)
	case errors.Is(err, ErrInvalidKey):
		return dead(delivery.ReasonInvalidKey)
	case errors.Is(err, ErrUndecodable):
		return dead(delivery.ReasonUndecodable)
	case errors.Is(err, ErrKeyReused):
		return dead(delivery.ReasonKeyReused)
	case errors.Is(err, ErrAttemptsExhausted):
		return dead(delivery.ReasonAttemptsExhausted)
	case IsPermanent(err):
		return dead(delivery.ReasonPermanent)
	case errors.Is(err, ErrStoreUnavailable):
		return delivery.Decision{Action: delivery.Retry, Delay: r.cfg.StoreRetryDelay, Reason: delivery.ReasonStoreUnavailable, Err: err}
	case !isHandlerError(err) && errors.Is(err, ErrInvalidConfig):
		return delivery.Decision{Action: delivery.Retry, Delay: r.cfg.StoreRetryDelay, Reason: delivery.ReasonStoreMisconfigured, Err: err}
	case !isHandlerError(err) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		// Not from Handle (an adapter's own wait): nothing was done.
		return delivery.Decision{Action: delivery.Retry, Delay: r.backoff(1), Reason: delivery.ReasonCanceled, Err: err}
	}
	// The attempt is unknown (0) for a handler that ran unprotected
	// (fail-open): such a failure is retried, never counted out.
	attempt := res.Attempt
	var he *HandlerError
	if errors.As(err, &he) && he.Attempt > 0 {
		attempt = he.Attempt
	}
	if attempt > 0 && attempt >= r.cfg.MaxAttempts {
		return dead(delivery.ReasonAttemptsExhausted)
	}
	return delivery.Decision{Action: delivery.Retry, Delay: r.backoff(max(attempt, 1)), Reason: delivery.ReasonHandlerError, Err: err}
}

func isHandlerError(err error) bool {
	var he *HandlerError
	return errors.As(err, &he)
}

// backoff is the Backoff's delay after attempt. A Backoff that panics or
// answers a negative delay gets the default's answer instead, logged.
func (r *Receiver[M, R]) backoff(attempt int) (d time.Duration) {
	defer func() {
		if p := recover(); p != nil {
			r.cfg.Logger.Error("dedup: Backoff panicked; using the default backoff", "panic", p)
			d = defaultBackoff.Delay(attempt)
		}
	}()
	d = r.cfg.Backoff.Delay(attempt)
	if d < 0 {
		return defaultBackoff.Delay(attempt)
	}
	return d
}

var defaultBackoff = ExponentialBackoff{Base: time.Second, Max: 5 * time.Minute}
