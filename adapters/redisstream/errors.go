package dedupredisstream

import (
	"errors"
	"fmt"

	"github.com/dedup-go/dedup"
)

// Errors of this package. Match them with errors.Is.
var (
	// ErrStarted: Start was called on a consumer that was already started
	// (a stopped one cannot be started again: make a new one).
	ErrStarted = errors.New("dedupredisstream: already started")
	// ErrNotStarted: Stop was called before Start.
	ErrNotStarted = errors.New("dedupredisstream: not started")
	// ErrNoDeadLetter: NewConsumer was given options (nil ones included)
	// without Options.DeadLetterStream and without Options.DropPoison, so a
	// poison entry would have nowhere to go. It matches
	// dedup.ErrInvalidConfig too.
	ErrNoDeadLetter = errors.New("dedupredisstream: no dead-letter stream")
	// ErrDeadLetterStream: Options.DeadLetterStream is the consumer's own
	// stream. It matches dedup.ErrInvalidConfig too.
	ErrDeadLetterStream = errors.New("dedupredisstream: dead-letter stream is the consumer's own")
	// ErrNoGroup: the consumer group (or its stream) does not exist and
	// Options.CreateGroup is not set. Start's error matches
	// dedup.ErrInvalidConfig too.
	ErrNoGroup = errors.New("dedupredisstream: no such consumer group")
	// ErrConsumerInUse: another live Consumer holds Options.Consumer's name
	// in the group. It matches dedup.ErrInvalidConfig too.
	ErrConsumerInUse = errors.New("dedupredisstream: consumer name in use")
	// ErrDeadLetter: a dead letter could not be added. The entry was not
	// acknowledged: it is tried again later.
	ErrDeadLetter = errors.New("dedupredisstream: dead letter not added")
	// ErrTrimmed: a pending entry was deleted from the stream (MAXLEN or
	// MINID trimming, XDEL) before its outcome was recorded: it is lost.
	// The Event of such an entry carries it, and Stats counts it in
	// Trimmed.
	ErrTrimmed = errors.New("dedupredisstream: pending entry deleted from the stream")
	// ErrStoppedUnasked: reading ended without Stop: the group was
	// deleted (without CreateGroup), or Start's context ended (a hard
	// stop). Err returns it, wrapping the cause, logged at error level.
	ErrStoppedUnasked = errors.New("dedupredisstream: stopped without Stop")
)

// configError is a refusal of NewConsumer or Start: it matches its
// sentinel and dedup.ErrInvalidConfig.
type configError struct {
	sentinel error
	msg      string
}

func (e *configError) Error() string { return e.msg }

func (e *configError) Is(target error) bool {
	return target == e.sentinel || target == dedup.ErrInvalidConfig
}

func wrapConfig(format string, args ...any) error {
	return fmt.Errorf("dedupredisstream: %w: %s", dedup.ErrInvalidConfig, fmt.Sprintf(format, args...))
}
