package outbox

import (
	"context"
	"time"
)

// Observer hears what a relay does: metrics and logs plug in here, as
// delivery.Observer does for deliveries. Observe is called synchronously on
// the relay's goroutine, so it must be fast and safe for concurrent use
// (several relays may share one); a panic in it is recovered and logged.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// EventKind says what an Event reports.
type EventKind uint8

// The kinds of Event.
const (
	// EventPublished: messages the broker acknowledged and the relay
	// marked sent, in one round of a batch. Messages counts them,
	// Duration is the round's (publish and mark), Lag the age of the
	// oldest when it was acknowledged.
	EventPublished EventKind = iota + 1
	// EventFailed: a step that failed, named by Op ("publish", "fetch",
	// "mark", "lease", "listen", "cleanup"), with Err. For "publish",
	// Messages counts the messages not acknowledged; Backoff is how long
	// the relay waits before it tries again.
	EventFailed
	// EventLeases: the buckets of ordering keys this relay holds changed:
	// Acquired, Released (given back: a stop, or a share for a relay that
	// joined) and Lost (taken by another relay after the lease ran out).
	EventLeases
	// EventCleaned: Messages sent rows deleted past the retention.
	EventCleaned
	// EventDead: messages the broker refused for good (an error matching
	// ErrPermanent), set aside as dead: IDs names them, Err gives each
	// one's refusal. The next messages of their ordering keys go on.
	EventDead
)

// String names the kind as metrics do: "published", "failed", "leases",
// "cleaned", "dead".
func (k EventKind) String() string {
	switch k {
	case EventPublished:
		return "published"
	case EventFailed:
		return "failed"
	case EventLeases:
		return "leases"
	case EventCleaned:
		return "cleaned"
	case EventDead:
		return "dead"
	}
	return "unknown"
}

// Event is one thing a relay did.
type Event struct {
	Kind EventKind
	// Relay is the relay's id, unique per run.
	Relay string
	// Op names the failed step of an EventFailed.
	Op string
	// Messages counts the messages the event is about.
	Messages int
	// Duration is how long the step took.
	Duration time.Duration
	// Lag is, for EventPublished, the time from the oldest message's
	// commit (its insert, by the database's clock) to its acknowledgement.
	Lag time.Duration
	// Backoff is how long the relay waits after a failure.
	Backoff time.Duration
	// Acquired, Released and Lost are the buckets of an EventLeases.
	Acquired, Released, Lost []int
	// IDs are the ids of the messages of an EventDead.
	IDs []string
	// Err is the error of an EventFailed.
	Err error
}
