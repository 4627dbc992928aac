package dedupwatermill

import (
	"errors"
	"fmt"

	"github.com/dedup-go/dedup/delivery"
)

var (
	// ErrPoison is matched by every error the middleware returns for a
	// message that retrying cannot help (the receiver's dead-letter
	// decision: a permanent handler error, attempts exhausted, no id, an
	// invalid id, an id reused with another payload, produced messages
	// not kept). Route these to Watermill's poison queue with
	// middleware.PoisonQueueWithFilter(pub, topic, IsPoison).
	ErrPoison = errors.New("dedupwatermill: poison message")

	// ErrInFlight is matched by the error of a message whose id another
	// delivery holds (in this process or another) for longer than
	// Options.MaxHold: it is nacked, never acknowledged unprocessed, and
	// looked at again when the broker redelivers it.
	ErrInFlight = errors.New("dedupwatermill: a delivery of this message is in flight elsewhere")

	// ErrResultNotKept is matched by the error of a duplicate whose first
	// delivery produced more than MaxResultSize of messages (encoded), so
	// that they could not be kept to give back: the duplicate is poison
	// (it also matches ErrPoison), for an operator to look at, rather than
	// acknowledged without the messages its first delivery produced.
	ErrResultNotKept = errors.New("dedupwatermill: the produced messages of this message's first delivery were not kept")
)

// PoisonError is the error the middleware returns for a message the
// receiver decided to dead-letter. It matches ErrPoison, and what Err
// matches (dedup.ErrAttemptsExhausted, dedup.ErrKeyReused,
// dedup.ErrNoKey, the handler's own error, ...).
type PoisonError struct {
	// Reason is the receiver's reason, as the Dedup-Reason metadata
	// carries it: permanent-error, attempts-exhausted, no-key,
	// invalid-key, key-reused, or result-not-stored (ErrResultNotKept).
	Reason delivery.Reason
	// Err is why.
	Err error
}

// Error gives the reason and why.
func (e *PoisonError) Error() string {
	return fmt.Sprintf("dedupwatermill: poison message (%s): %v", e.Reason, e.Err)
}

// Unwrap returns Err.
func (e *PoisonError) Unwrap() error { return e.Err }

// Is reports whether target is ErrPoison.
func (e *PoisonError) Is(target error) bool { return target == ErrPoison }

// IsPoison reports whether err is (or wraps) a dead-letter decision of the
// middleware: the filter to give middleware.PoisonQueueWithFilter, so that
// only these reach the poison queue and every other error (a handler
// failure with attempts left, a message in flight elsewhere, a store
// outage) is nacked and redelivered.
func IsPoison(err error) bool { return errors.Is(err, ErrPoison) }
