package dedup

import (
	"time"

	"github.com/dedup-go/dedup/delivery"
)

// Result is the outcome of one delivery.
type Result[R any] struct {
	// Status says what happened.
	Status delivery.Status
	// Value is the handler's result (processed, bypassed) or the first
	// result replayed (duplicate). Concurrent duplicates inside one process
	// share the first delivery's value.
	Value R
	// Key is the store key: namespace, ':', message id. Empty when the
	// message had no usable id.
	Key string
	// Attempt is the claim's attempt number (1 for the first delivery that
	// ran the handler), or the holder's for in-flight and duplicate results.
	Attempt int
	// RetryAfter is, for StatusInFlight, when to look at the key again:
	// about 200 ms the first time this receiver finds the key held, twice
	// as long each further time in a row, and never more than the holder's
	// lease still runs (or 200 ms, when less remains). A holder that finishes is seen within a fraction of
	// a second; one that died costs its lease.
	RetryAfter time.Duration
	// Problem is what went wrong beside a done status, which the delivery
	// is still acknowledged with: the effect happened, and a redelivery
	// would repeat it. It matches ErrResultNotStored (the result could not
	// be encoded or stored: a later duplicate may get the zero value, or
	// run again if the completion itself failed), ErrLeaseLost (another
	// delivery took the key over before the completion), or
	// ErrResultUndecodable (a duplicate whose stored result did not
	// decode: Value is the zero value). Nil otherwise. Each problem is
	// counted in Stats and logged at warning level or above.
	Problem error
}

// Outcome pairs a Result with its error, for HandleBatch.
type Outcome[R any] struct {
	Result Result[R]
	Err    error
}
