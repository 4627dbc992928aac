package dedup

import (
	"context"
	"time"
)

// Observer hears of every outcome: the receiver reports each delivery it
// handled (EventHandled), and broker adapters report what they did with it
// (EventSettled). Metrics, tracing and logs plug in here. Observe is called
// synchronously on the delivery's goroutine, so it must be fast and safe
// for concurrent use; a panic in it is recovered and logged.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// EventKind says who reports an Event.
type EventKind uint8

const (
	// EventHandled: the receiver finished Handle (or one message of
	// HandleBatch).
	EventHandled EventKind = iota + 1
	// EventSettled: an adapter carried out its decision on the delivery
	// (ack, retry, dead letter), or failed to.
	EventSettled
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case EventHandled:
		return "handled"
	case EventSettled:
		return "settled"
	default:
		return "unknown"
	}
}

// Event is one report to an Observer.
type Event struct {
	Kind EventKind
	// Namespace is the receiver's namespace; Key the record's key (empty
	// when the message had no usable id).
	Namespace string
	Key       string
	// Status is what the receiver did; Attempt the claim's attempt.
	Status  Status
	Attempt int
	// Err is the error Handle returned (EventHandled), or the error that
	// kept an adapter from carrying out its decision (EventSettled).
	Err error
	// Problem is Result.Problem: what went wrong beside a done status.
	Problem error
	// Decision is what the adapter did (EventSettled only).
	Decision Decision
	// Broker and Source say where the message came from (EventSettled):
	// "jetstream" and the subject, "rabbitmq" and the queue, ...
	Broker, Source string
	// MessageID, Stream, Partition, Offset and DeliveryCount are the
	// envelope's (EventSettled): which delivery of which message this was.
	// They are zero where the broker has none.
	MessageID     string
	Stream        string
	Partition     int
	Offset        int64
	DeliveryCount int
	// Duration is the time Handle took; HandlerDuration the part of it the
	// handler ran, StoreDuration the part spent waiting on the store
	// (claim and completion). Zero for EventSettled, and for a batch the
	// whole batch's, shared by its messages.
	Duration, HandlerDuration, StoreDuration time.Duration
}
