package dedupkafka

import (
	"errors"

	"github.com/dedup-go/dedup"
)

// Errors of this package. Match them with errors.Is.
var (
	// ErrStarted: Start was called on a consumer that was already started
	// (a stopped one cannot be started again: make a new one).
	ErrStarted = errors.New("dedupkafka: already started")
	// ErrNotStarted: Stop was called before Start.
	ErrNotStarted = errors.New("dedupkafka: not started")
	// ErrReaderConfig: the reader cannot be wrapped: it has no GroupID, or
	// a CommitInterval other than 0 (its asynchronous commits report errors
	// only to its own logger). It matches dedup.ErrInvalidConfig too.
	ErrReaderConfig = errors.New("dedupkafka: reader configuration not supported")
	// ErrHorizon: the receiver's retention is shorter than the reader's
	// redelivery horizon, and Options.StrictHorizon is set. It matches
	// dedup.ErrInvalidConfig too.
	ErrHorizon = errors.New("dedupkafka: retention shorter than the redelivery horizon")
	// ErrDeadLetter: a dead letter could not be written. The original was
	// not committed: it is retried in place.
	ErrDeadLetter = errors.New("dedupkafka: dead letter not written")
	// ErrCommit: committing offsets failed. The watermark is committed again
	// on the next tick; until then a crash re-reads more messages, which
	// the store answers as duplicates.
	ErrCommit = errors.New("dedupkafka: commit failed")
	// ErrRetryWrite: a message could not be written to its retry topic. The
	// original was not committed: the write is tried again after the
	// receiver's StoreRetryDelay.
	ErrRetryWrite = errors.New("dedupkafka: retry message not written")
	// ErrRetryTopics: Options.RetryTopics is set, and Start found a retry
	// topic missing, one that keeps messages for less than its tier, or a
	// receiver whose retention is shorter than the longest tier. It
	// matches dedup.ErrInvalidConfig too.
	ErrRetryTopics = errors.New("dedupkafka: retry topics not usable")
	// ErrDeadLetterTopic: Options.DeadLetterTopic is set, and Start could
	// not find it (the Consumer creates no topic: a missing one would stall
	// its partition at the first poison message). It matches
	// dedup.ErrInvalidConfig too.
	ErrDeadLetterTopic = errors.New("dedupkafka: dead-letter topic not usable")
	// ErrStoppedUnasked: the consumer stopped without Stop: Start's context
	// ended (a hard stop), or the reader was closed under it. Err returns
	// it, wrapping the cause (context.Cause of Start's context, io.EOF when
	// a fetch found the reader closed, io.ErrClosedPipe when a commit did),
	// and it is logged at error level. Other fetch errors do not stop the
	// consumer: kafka-go's reader goes on from them, and they are logged.
	ErrStoppedUnasked = errors.New("dedupkafka: stopped without Stop")
)

// configError matches its sentinel and dedup.ErrInvalidConfig.
type configError struct {
	sentinel error
	msg      string
}

func (e *configError) Error() string { return e.msg }

func (e *configError) Is(target error) bool {
	return target == e.sentinel || target == dedup.ErrInvalidConfig
}
