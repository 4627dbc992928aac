package dedupfranz

import (
	"errors"

	"github.com/dedup-go/dedup"
)

// Errors of this package. Match them with errors.Is.
var (
	// ErrStarted: Start was called on a consumer that was already started
	// (a stopped one cannot be started again: make a new one).
	ErrStarted = errors.New("dedupfranz: already started")
	// ErrNotStarted: Stop was called before Start.
	ErrNotStarted = errors.New("dedupfranz: not started")
	// ErrClientConfig: the client cannot be built from the caller's
	// kgo options (kgo.NewClient refused them), or they set what the
	// Consumer must own: RequiredAcks other than kgo.AllISRAcks (dead
	// letters and retry copies need every in-sync replica), or
	// BlockRebalanceOnPoll, ConsumeTopics, ConsumePartitions or a
	// ShareGroup of their own. It matches dedup.ErrInvalidConfig too.
	ErrClientConfig = errors.New("dedupfranz: client configuration not supported")
	// ErrHorizon: the receiver's retention is shorter than the group's
	// redelivery horizon, and Options.StrictHorizon is set. It matches
	// dedup.ErrInvalidConfig too.
	ErrHorizon = errors.New("dedupfranz: retention shorter than the redelivery horizon")
	// ErrDeadLetter: a dead letter could not be written. The original was
	// not committed: it is retried in place.
	ErrDeadLetter = errors.New("dedupfranz: dead letter not written")
	// ErrCommit: committing offsets failed. The watermark is committed again
	// on the next tick; until then a crash re-reads more messages, which
	// the store answers as duplicates.
	ErrCommit = errors.New("dedupfranz: commit failed")
	// ErrRetryWrite: a message could not be written to its retry topic. The
	// original was not committed: the write is tried again after the
	// receiver's StoreRetryDelay.
	ErrRetryWrite = errors.New("dedupfranz: retry message not written")
	// ErrRetryTopics: Options.RetryTopics is set, and Start found a retry
	// topic missing, one that keeps messages for less than its tier, or a
	// receiver whose retention is shorter than the longest tier. It
	// matches dedup.ErrInvalidConfig too.
	ErrRetryTopics = errors.New("dedupfranz: retry topics not usable")
	// ErrDeadLetterTopic: Options.DeadLetterTopic is set, and Start could
	// not find it (the Consumer creates no topic: a missing one would stall
	// its partition at the first poison message). It matches
	// dedup.ErrInvalidConfig too.
	ErrDeadLetterTopic = errors.New("dedupfranz: dead-letter topic not usable")
	// ErrStoppedUnasked: the consumer stopped without Stop: Start's context
	// ended (a hard stop). Err returns it, wrapping context.Cause of
	// Start's context, and it is logged at error level. Fetch errors do not
	// stop the consumer: the client goes on from them, and they are logged.
	ErrStoppedUnasked = errors.New("dedupfranz: stopped without Stop")
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
