package delivery

import "time"

// Event is one delivery of one message, from the start of its handling to
// what the adapter did with it: everything a dashboard needs, the same on
// every broker and middleware.
type Event struct {
	// Origin is where the delivery came from.
	Origin
	// Namespace is the receiver's namespace; Key the record's key (empty
	// when the message had no usable id). The key is never a metric
	// attribute: it is unbounded.
	Namespace string
	Key       string
	// Store names the receiver's store by its package: "memstore",
	// "redisstore", "tieredstore", "pgstore", ...
	Store string
	// Status is what the receiver did; Attempt the claim's attempt.
	Status  Status
	Attempt int
	// Decision is what was done with the delivery: what the adapter carried
	// out when Settled, else what Decide answers.
	Decision Decision
	// Err is the error Handle returned; Problem is Result.Problem, what
	// went wrong beside a done status.
	Err     error
	Problem error
	// Stored reports whether the store holds this delivery's outcome: a
	// completed record (this delivery's, or the one a duplicate was
	// answered from). False for a bypassed run, a result not stored, a
	// failure.
	Stored bool
	// Duration is the time the receiver took; HandlerDuration the part of
	// it the handler ran, StoreDuration the part spent waiting on the
	// store: ClaimDuration claiming the key, CompleteDuration recording
	// the outcome (with its retries). For a message of a batch, Duration is
	// the whole batch's, shared by its messages, and the other two are
	// zero: the batch's store round trips serve every message at once.
	Duration, HandlerDuration, StoreDuration time.Duration
	ClaimDuration, CompleteDuration          time.Duration
	// Settled reports whether an adapter carried out the Decision (acked,
	// retried, dead-lettered), taking SettleDuration; SettleErr is what
	// kept it from doing so (the ack failed, the dead letter was not
	// confirmed), nil when it did.
	Settled        bool
	SettleDuration time.Duration
	SettleErr      error
}
