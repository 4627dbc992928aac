package dedupamqp

import (
	"errors"
	"fmt"

	"github.com/dedup-go/dedup"
)

// Errors of this package. Match them with errors.Is.
var (
	// ErrStarted: Start was called on a Consumer that was already started
	// (a stopped one cannot be started again: make a new one).
	ErrStarted = errors.New("dedupamqp: already started")
	// ErrNotStarted: Stop was called before Start.
	ErrNotStarted = errors.New("dedupamqp: not started")
	// ErrHorizon: the receiver's lease does not fit in the broker's
	// consumer_timeout, or its retention is shorter than the longest retry
	// tier, and Options.StrictHorizon is set. It matches
	// dedup.ErrInvalidConfig too.
	ErrHorizon = errors.New("dedupamqp: lease or retention does not fit the broker's horizon")
	// ErrQueueDeleted: the queue was deleted while the Consumer consumed
	// it; the Consumer stopped, and Err returns an error matching this and
	// ErrStoppedUnasked.
	ErrQueueDeleted = errors.New("dedupamqp: queue deleted")
	// ErrStoppedUnasked: the Consumer stopped without Stop: Start's context
	// ended (a hard stop), or the queue was deleted. Err returns an error
	// matching it and wrapping the cause: context.Cause of Start's context,
	// or ErrQueueDeleted. It is logged at error level.
	ErrStoppedUnasked = errors.New("dedupamqp: stopped without Stop")
	// ErrReturned: the broker returned a mandatory publish (a dead letter,
	// a retry, a Publisher's message) as unroutable: no queue is bound
	// where it was sent. Nothing was stored.
	ErrReturned = errors.New("dedupamqp: message returned unroutable")
	// ErrNacked: the broker refused to take responsibility for a publish
	// (basic.nack). Nothing may have been stored.
	ErrNacked = errors.New("dedupamqp: publish nacked by the broker")
	// ErrDeadLetter: a dead letter could not be published. The original was
	// requeued, not acknowledged: it is dead-lettered again on a later
	// delivery.
	ErrDeadLetter = errors.New("dedupamqp: dead letter not published")
	// ErrStaleDelivery: a delivery could not be settled because the channel
	// it came on is gone (a connection loss). The broker requeued it when
	// the channel closed; its redelivery is answered by the store.
	ErrStaleDelivery = errors.New("dedupamqp: delivery of a closed channel not settled")
	// ErrPublisherClosed: Publish was called on an OutboxPublisher or a
	// Publisher after its Close.
	ErrPublisherClosed = errors.New("dedupamqp: publisher closed")
)

// horizonError matches both ErrHorizon and dedup.ErrInvalidConfig.
type horizonError struct{ msg string }

func (e *horizonError) Error() string { return e.msg }

func (e *horizonError) Is(target error) bool {
	return target == ErrHorizon || target == dedup.ErrInvalidConfig
}

func wrapConfig(format string, args ...any) error {
	return fmt.Errorf("dedupamqp: %w: %s", dedup.ErrInvalidConfig, fmt.Sprintf(format, args...))
}
