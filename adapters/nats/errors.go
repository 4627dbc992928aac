package nats

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
	// redelivery horizon, and Options.StrictHorizon is set. It matches
	// dedup.ErrInvalidConfig too.
	ErrHorizon = errors.New("dedupnats: retention shorter than the redelivery horizon")
	// ErrDeadLetter: a dead letter could not be published. The message was
	// not terminated: it is redelivered and dead-lettered again later.
	ErrDeadLetter = errors.New("dedupnats: dead letter not published")
)

// horizonError matches both ErrHorizon and dedup.ErrInvalidConfig.
type horizonError struct{ msg string }

func (e *horizonError) Error() string { return e.msg }

func (e *horizonError) Is(target error) bool {
	return target == ErrHorizon || target == dedup.ErrInvalidConfig
}
