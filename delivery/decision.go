package delivery

import "time"

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
	// ReasonCompensationFailed: the message was given up, and the
	// compensation of one of its steps kept failing (dedup.Compensate).
	ReasonCompensationFailed Reason = "compensation-failed"
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
