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
	ReasonProcessed         Reason = "processed"
	ReasonDuplicate         Reason = "duplicate"
	ReasonBypassed          Reason = "bypassed"
	ReasonNotStored         Reason = "result-not-stored" // done, but the record may not say so
	ReasonInFlight          Reason = "in-flight"
	ReasonHandlerError      Reason = "handler-error"
	ReasonPermanent         Reason = "permanent-error"
	ReasonAttemptsExhausted Reason = "attempts-exhausted"
	ReasonNoKey             Reason = "no-key"
	ReasonInvalidKey        Reason = "invalid-key"
	ReasonUndecodable       Reason = "undecodable"
	ReasonKeyReused         Reason = "key-reused"
	ReasonStoreUnavailable  Reason = "store-unavailable"
	ReasonCancelled         Reason = "cancelled"
)

// Decision is what to do with a delivery, shared by every adapter so that
// the same situation gets the same answer on every broker.
type Decision struct {
	Action Action
	// Delay before redelivery, for Retry.
	Delay time.Duration
	// Reason is why; for DeadLetter, adapters put it in a header.
	Reason Reason
	// Err is the error the decision was taken on, if any.
	Err error
}

// Policy holds the numbers Decide needs. Receiver.Policy returns the one
// matching a receiver's Config.
type Policy struct {
	// MaxAttempts: a handler error on this attempt or later dead-letters.
	// Zero means DefaultMaxAttempts.
	MaxAttempts int
	// Backoff is the retry delay after a failed attempt. Nil means
	// ExponentialBackoff(time.Second, 5*time.Minute).
	Backoff func(attempt int) time.Duration
	// StoreRetryDelay is the retry delay when the store is unavailable.
	// Zero means DefaultStoreRetryDelay.
	StoreRetryDelay time.Duration
}

// Decide maps a Handle outcome to an action:
//
//	processed, duplicate, bypassed (even with an error)  Ack
//	in flight elsewhere                                  Retry after the remaining lease
//	handler error, attempts left                         Retry with backoff
//	permanent error, attempts exhausted, no key,
//	invalid key, undecodable body, key reused            DeadLetter with the reason
//	store unavailable (fail-closed)                      Retry after StoreRetryDelay
//	context cancelled (shutdown)                         Retry with the first backoff
//
// A done status wins over its error: the effect happened, and redelivery
// would repeat it.
func Decide[R any](res Result[R], err error, p Policy) Decision {
	maxAttempts := p.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = DefaultMaxAttempts
	}
	backoff := p.Backoff
	if backoff == nil {
		backoff = ExponentialBackoff(time.Second, 5*time.Minute)
	}
	storeDelay := p.StoreRetryDelay
	if storeDelay <= 0 {
		storeDelay = DefaultStoreRetryDelay
	}

	if res.Status.Done() {
		d := Decision{Action: Ack, Err: err}
		switch {
		case err != nil:
			d.Reason = ReasonNotStored
		case res.Status == StatusDuplicate:
			d.Reason = ReasonDuplicate
		case res.Status == StatusBypassed:
			d.Reason = ReasonBypassed
		default:
			d.Reason = ReasonProcessed
		}
		return d
	}
	if err == nil {
		if res.Status == StatusInFlight {
			return Decision{Action: Retry, Delay: res.RetryAfter, Reason: ReasonInFlight}
		}
		// StatusNone without an error does not come from Handle; retrying is
		// the answer that loses nothing.
		return Decision{Action: Retry, Delay: backoff(1), Reason: ReasonHandlerError}
	}

	dead := func(r Reason) Decision { return Decision{Action: DeadLetter, Reason: r, Err: err} }
	switch {
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
		return Decision{Action: Retry, Delay: storeDelay, Reason: ReasonStoreUnavailable, Err: err}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Decision{Action: Retry, Delay: backoff(1), Reason: ReasonCancelled, Err: err}
	}
	attempt := max(res.Attempt, 1)
	var he *HandlerError
	if errors.As(err, &he) && he.Attempt > 0 {
		attempt = he.Attempt
	}
	if res.Attempt > 0 && attempt >= maxAttempts {
		return dead(ReasonAttemptsExhausted)
	}
	return Decision{Action: Retry, Delay: backoff(attempt), Reason: ReasonHandlerError, Err: err}
}
