package dedup

import (
	"context"
	"errors"
	"time"
)

// Action is what an adapter does with a delivery.
type Action uint8

const (
	// Ack acknowledges the delivery: its effect happened (or never will).
	Ack Action = iota + 1
	// Retry hands the delivery back to the broker for redelivery after Delay.
	Retry
	// DeadLetter removes the delivery from the stream and parks it with
	// Reason: retrying cannot help.
	DeadLetter
)

// String returns the action's name.
func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Retry:
		return "retry"
	case DeadLetter:
		return "dead-letter"
	default:
		return "unknown"
	}
}

// Reason says why a decision was taken, in a form fit for a header or a
// metric label.
type Reason string

// The reasons Decide gives.
const (
	ReasonProcessed          Reason = "processed"
	ReasonDuplicate          Reason = "duplicate"
	ReasonBypassed           Reason = "bypassed"
	ReasonNotStored          Reason = "result-not-stored" // done, but the record may not say so
	ReasonInFlight           Reason = "in-flight"
	ReasonHandlerError       Reason = "handler-error"
	ReasonPermanent          Reason = "permanent-error"
	ReasonAttemptsExhausted  Reason = "attempts-exhausted"
	ReasonNoKey              Reason = "no-key"
	ReasonInvalidKey         Reason = "invalid-key"
	ReasonUndecodable        Reason = "undecodable"
	ReasonKeyReused          Reason = "key-reused"
	ReasonStoreUnavailable   Reason = "store-unavailable"
	ReasonStoreMisconfigured Reason = "store-misconfigured"
	ReasonCanceled           Reason = "canceled"
)

// Decision is what to do with a delivery, shared by every adapter so that
// the same situation gets the same answer on every broker.
type Decision struct {
	Action Action
	// Delay before redelivery, for Retry.
	Delay time.Duration
	// Reason is why; for DeadLetter, adapters put it in a header.
	Reason Reason
	// Err is the error the decision was taken on, or the Result's Problem
	// for an Ack.
	Err error
}

// Decide maps an outcome of Handle to an action, with this receiver's
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
//	caller's context ended (shutdown): ErrCanceled       Retry with the first backoff
//	handler cancelled because its lease was lost         Retry with the first backoff (in flight elsewhere)
//
// A handler that fails with its own deadline (context.DeadlineExceeded of a
// context it made) is a handler error like any other: it backs off and
// counts towards MaxAttempts. Only the end of the caller's context means
// "not processed".
func (r *Receiver[M, R]) Decide(res Result[R], err error) Decision {
	if res.Status.Done() {
		d := Decision{Action: Ack, Reason: ReasonProcessed}
		switch {
		case res.Problem != nil && !errors.Is(res.Problem, ErrResultUndecodable):
			d.Reason, d.Err = ReasonNotStored, res.Problem
		case res.Status == StatusDuplicate:
			d.Reason, d.Err = ReasonDuplicate, res.Problem
		case res.Status == StatusBypassed:
			d.Reason = ReasonBypassed
		}
		return d
	}
	if err == nil {
		if res.Status == StatusInFlight {
			return Decision{Action: Retry, Delay: res.RetryAfter, Reason: ReasonInFlight}
		}
		// StatusNone without an error does not come from Handle; retrying is
		// the answer that loses nothing.
		return Decision{Action: Retry, Delay: r.backoff(1), Reason: ReasonHandlerError}
	}

	dead := func(reason Reason) Decision { return Decision{Action: DeadLetter, Reason: reason, Err: err} }
	switch {
	case errors.Is(err, ErrCanceled):
		return Decision{Action: Retry, Delay: r.backoff(1), Reason: ReasonCanceled, Err: err}
	case errors.Is(err, ErrLeaseLost):
		// Another delivery holds the key now: its outcome decides.
		return Decision{Action: Retry, Delay: r.backoff(1), Reason: ReasonInFlight, Err: err}
	case errors.Is(err, ErrNoKey):
		return dead(ReasonNoKey)
	case errors.Is(err, ErrInvalidKey):
		return dead(ReasonInvalidKey)
	case errors.Is(err, ErrUndecodable):
		return dead(ReasonUndecodable)
	case errors.Is(err, ErrKeyReused):
		return dead(ReasonKeyReused)
	case errors.Is(err, ErrAttemptsExhausted):
		return dead(ReasonAttemptsExhausted)
	case IsPermanent(err):
		return dead(ReasonPermanent)
	case errors.Is(err, ErrStoreUnavailable):
		return Decision{Action: Retry, Delay: r.cfg.StoreRetryDelay, Reason: ReasonStoreUnavailable, Err: err}
	case !isHandlerError(err) && errors.Is(err, ErrInvalidConfig):
		return Decision{Action: Retry, Delay: r.cfg.StoreRetryDelay, Reason: ReasonStoreMisconfigured, Err: err}
	case !isHandlerError(err) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		// Not from Handle (an adapter's own wait): nothing was done.
		return Decision{Action: Retry, Delay: r.backoff(1), Reason: ReasonCanceled, Err: err}
	}
	// The attempt is unknown (0) for a handler that ran unprotected
	// (fail-open): such a failure is retried, never counted out.
	attempt := res.Attempt
	var he *HandlerError
	if errors.As(err, &he) && he.Attempt > 0 {
		attempt = he.Attempt
	}
	if attempt > 0 && attempt >= r.cfg.MaxAttempts {
		return dead(ReasonAttemptsExhausted)
	}
	return Decision{Action: Retry, Delay: r.backoff(max(attempt, 1)), Reason: ReasonHandlerError, Err: err}
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
