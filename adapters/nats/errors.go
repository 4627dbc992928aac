package dedupnats

import (
	"errors"

	"github.com/dedup-go/dedup"
)

// Errors of this package. Match them with errors.Is.
var (
	// ErrStarted: Start was called on a consumer or subscriber that was
	// already started (a stopped one cannot be started again: make a new
	// one).
	ErrStarted = errors.New("dedupnats: already started")
	// ErrNotStarted: Stop was called before Start.
	ErrNotStarted = errors.New("dedupnats: not started")
	// ErrHorizon: the receiver's retention is shorter than the consumer's
	// redelivery horizon, or a third of its lease is not under the
	// consumer's AckWait, and Options.StrictHorizon is set. It matches
	// dedup.ErrInvalidConfig too.
	ErrHorizon = errors.New("dedupnats: retention shorter than the redelivery horizon")
	// ErrNoDeadLetter: NewConsumer or NewSubscriber was given options
	// (nil ones included) without Options.DeadLetterSubject and without
	// Options.DropPoison, so a poison message would have nowhere to go.
	// It matches dedup.ErrInvalidConfig too.
	ErrNoDeadLetter = errors.New("dedupnats: no dead-letter subject")
	// ErrDeadLetterStream: no stream captures Options.DeadLetterSubject
	// (and Options.CoreDeadLetters is not set), or the consumer's own
	// stream captures it (the consumer would read its dead letters back).
	// It matches dedup.ErrInvalidConfig too.
	ErrDeadLetterStream = errors.New("dedupnats: dead-letter subject not captured by a stream of its own")
	// ErrAckPolicy: the JetStream consumer does not use explicit acks
	// (AckNone or AckAll), so a retry or a dead letter of one message could
	// not be told apart from the others. It matches dedup.ErrInvalidConfig
	// too.
	ErrAckPolicy = errors.New("dedupnats: consumer must use AckExplicitPolicy")
	// ErrDeadLetter: a dead letter could not be published. The message was
	// not terminated: it is redelivered and dead-lettered again later.
	ErrDeadLetter = errors.New("dedupnats: dead letter not published")
	// ErrStoppedUnasked: fetching or the subscription ended without Stop:
	// the consumer or its stream was deleted, the connection closed, or
	// Start's context ended (a hard stop). Err returns it, wrapping the
	// cause (jetstream.ErrConsumerDeleted, nats.ErrConnectionClosed, or
	// context.Cause of Start's context), logged at error level.
	ErrStoppedUnasked = errors.New("dedupnats: stopped without Stop")
)

// configError is a refusal of Start: it matches its sentinel and
// dedup.ErrInvalidConfig.
type configError struct {
	sentinel error
	msg      string
}

func (e *configError) Error() string { return e.msg }

func (e *configError) Is(target error) bool {
	return target == e.sentinel || target == dedup.ErrInvalidConfig
}
