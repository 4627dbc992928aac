package dedupfranz

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/dedup-go/dedup"
)

// Defaults of Options.
const (
	defaultConcurrency     = 8
	defaultBatchSize       = 1
	defaultPartitionBuffer = 256
	defaultCommitInterval  = time.Second
	defaultMinRetryDelay   = 100 * time.Millisecond
	defaultSettleTimeout   = 10 * time.Second
	defaultRevokeTimeout   = 5 * time.Second
)

// CommitEveryOutcome is the value of Options.CommitInterval that commits a
// partition's watermark as soon as it moves, before the partition goes on
// to its next message (or batch).
const CommitEveryOutcome time.Duration = -1

// Options configure a Consumer. A nil *Options is the zero Options: every
// field takes its default. One field has none: where poison goes
// (DeadLetterTopic, or DropPoison to drop it on purpose) is the caller's
// choice, so NewConsumer refuses Options that set neither, nil included,
// with an error matching dedup.ErrInvalidConfig that names both
// ("dedupfranz: dedup: invalid config: neither Options.DeadLetterTopic nor
// Options.DropPoison is set ...").
//
// There is no callback among them: each delivery is reported once, when
// settled, to the receiver's dedup.Config.Observer (see Observing in the
// package documentation), and Consumer.Stats counts what was done.
type Options struct {
	// Concurrency is how many partitions are handled at once. Each
	// partition is handled in offset order, one message (or batch) at a
	// time. Defaults to 8.
	Concurrency int

	// BatchSize is the most messages of one partition handed to the
	// receiver's HandleBatch at once: what has been fetched for the
	// partition, up to BatchSize, after waiting at most Linger. Over a
	// store that batches (redisstore, tieredstore), a batch costs one round
	// trip per phase instead of one per message. The handlers of a batch
	// run in offset order, but a failed message does not hold back the
	// later messages of its batch: they may take effect before its retry
	// does. The completions of a batch are recorded together after its
	// last handler, so a crash mid-batch repeats the effects of the batch's
	// handlers that had succeeded. With BatchSize 1 a partition's first
	// effects are in offset order whatever fails, and a crash repeats at
	// most the effect whose completion was on its way. Defaults to 1.
	BatchSize int

	// Linger is how long a partition waits for more messages to fill a
	// batch once it has one. Defaults to 0: a batch is what has already
	// been fetched.
	Linger time.Duration

	// PartitionBuffer is how many fetched records may wait for each
	// partition. A partition whose records reach it (its handler waits on a
	// key held elsewhere, its store is down, it retries) is paused alone
	// (kgo's PauseFetchPartitions), and resumed once its worker has taken
	// half of them: the other partitions keep fetching. At most
	// PartitionBuffer records per partition, plus what one fetch response
	// held for it (kgo.FetchMaxPartitionBytes), wait in memory. Defaults to
	// 256.
	PartitionBuffer int

	// CommitInterval is how often the partitions' watermarks are committed
	// (one OffsetCommit for all of them). A crash loses at most this much of
	// commits: the next owner re-reads those messages, and the store
	// answers them as duplicates. CommitEveryOutcome commits each
	// partition's watermark as soon as it moves, before the partition goes
	// on (the partitions that moved while a commit was on its way share the
	// next OffsetCommit). Defaults to 1s.
	CommitInterval time.Duration

	// DeadLetterTopic receives poison messages (undecodable, no id,
	// permanent errors, attempts exhausted, key reused): the original key,
	// value and headers, plus Dedup-* headers saying why (see the package
	// documentation). The original is committed only after the write was
	// acknowledged by all in-sync replicas (it is produced with the
	// Consumer's own client, whose RequiredAcks must be kgo.AllISRAcks,
	// the default). One of DeadLetterTopic and DropPoison is required:
	// NewConsumer refuses neither and both. The Consumer does not create
	// the topic: Start fails with ErrDeadLetterTopic when it does not
	// exist.
	DeadLetterTopic string

	// DropPoison commits past poison messages instead of writing them to a
	// dead-letter topic: each is logged at error level with its topic,
	// partition, offset and reason, and counted (Stats().PoisonDropped).
	// It is the explicit way to run without a DeadLetterTopic. Defaults to
	// false.
	DropPoison bool

	// RetryTopics are the delays of the retry topics, shortest first. With
	// them, a handler error whose Retry delay (the receiver's Backoff) is at
	// least the shortest tier is not retried in place, holding its
	// partition back, but written to the retry topic of the smallest tier
	// at least the delay (or of the largest): RetryTopic(topic, tier), with
	// the headers of the package documentation and a HeaderNotBefore of the
	// write's time plus the tier. The original is committed once the write
	// was acknowledged by all in-sync replicas, and its partition goes on.
	// The retry topics are read by Consumers of their own (with the same
	// receiver and options), which hand each message over no sooner than
	// its HeaderNotBefore. What is given up: a retried message takes effect
	// after the messages behind it in its partition. Start checks that the
	// retry topics exist, keep messages for at least their tier, and that
	// the receiver's retention is at least the longest tier. Defaults to
	// none: every retry is in place.
	RetryTopics []time.Duration

	// Decoder decodes the message value into the handler's type. Defaults
	// to dedup.JSONDecoder (strict: an empty value or one that is not valid
	// UTF-8 is undecodable); dedup.RawDecoder hands []byte or string bodies
	// over as they are.
	Decoder dedup.Decoder

	// Fingerprint stores a SHA-256 of the value with each record, so that a
	// message carrying an id already used with another value is
	// dead-lettered as key-reused instead of answered with the other
	// message's result. Defaults to false.
	Fingerprint bool

	// MinRetryDelay is the shortest wait before a message is retried in
	// place, so that a message in flight elsewhere whose lease is about to
	// end does not spin. Defaults to 100ms.
	MinRetryDelay time.Duration

	// SettleTimeout bounds each dead-letter write and commit, which run
	// even while the consumer stops. Defaults to 10s.
	SettleTimeout time.Duration

	// RevokeTimeout bounds how long OnPartitionsRevoked waits for the
	// handlers running on the revoked partitions to finish, before it
	// commits what is done and returns, letting the rebalance go on. A
	// handler still running then goes on under its lease; its outcome is
	// recorded in the store but not committed (the partition is no longer
	// this member's), and the new owner finds it done or in flight. Keep
	// it well under the group's rebalance timeout (kgo.RebalanceTimeout,
	// 60s by default): a member that takes longer is kicked out of the
	// group. A partition waiting to retry in place (a key in flight
	// elsewhere, a store down) stops waiting at once. Defaults to 5s.
	RevokeTimeout time.Duration

	// StrictHorizon makes Start fail with ErrHorizon when the receiver's
	// retention is shorter than the group's redelivery horizon (see
	// Horizon check in the package documentation). Defaults to false: a
	// warning is logged.
	StrictHorizon bool

	// DestinationTemplate names the destination of every delivery by a
	// template, its form without ids (delivery.Origin.DestinationTemplate,
	// messaging.destination.template to dedupotel, which names the spans
	// after it and leaves the topic off the metrics when it differs): for
	// topics whose names carry one. Defaults to none: a topic's name is its
	// own.
	DestinationTemplate string

	// Logger receives warnings and errors (poison dropped under DropPoison,
	// failed dead-letter writes and commits, the horizon check). Defaults
	// to the receiver's logger (dedup.Config.Logger).
	Logger *slog.Logger
}

// withDefaults returns the options with their defaults filled in; logger is
// the receiver's.
func (o *Options) withDefaults(logger *slog.Logger) Options {
	var out Options
	if o != nil {
		out = *o
	}
	out.Concurrency = cmp.Or(out.Concurrency, defaultConcurrency)
	out.BatchSize = cmp.Or(out.BatchSize, defaultBatchSize)
	out.PartitionBuffer = cmp.Or(out.PartitionBuffer, defaultPartitionBuffer)
	out.CommitInterval = cmp.Or(out.CommitInterval, defaultCommitInterval)
	out.MinRetryDelay = cmp.Or(out.MinRetryDelay, defaultMinRetryDelay)
	out.SettleTimeout = cmp.Or(out.SettleTimeout, defaultSettleTimeout)
	out.RevokeTimeout = cmp.Or(out.RevokeTimeout, defaultRevokeTimeout)
	if out.Decoder == nil {
		out.Decoder = dedup.JSONDecoder{}
	}
	out.Logger = cmp.Or(out.Logger, logger)
	out.RetryTopics = slices.Clone(out.RetryTopics)
	return out
}

func (o *Options) validate() error {
	switch {
	case o.Concurrency < 0:
		return wrapConfig("Concurrency is %d; it must be positive", o.Concurrency)
	case o.BatchSize < 0:
		return wrapConfig("BatchSize is %d; it must be positive", o.BatchSize)
	case o.Linger < 0:
		return wrapConfig("Linger is %v; it must not be negative", o.Linger)
	case o.PartitionBuffer < 0:
		return wrapConfig("PartitionBuffer is %d; it must be positive", o.PartitionBuffer)
	case o.CommitInterval < 0 && o.CommitInterval != CommitEveryOutcome:
		return wrapConfig("CommitInterval is %v; it must be positive, or CommitEveryOutcome", o.CommitInterval)
	case o.MinRetryDelay < 0:
		return wrapConfig("MinRetryDelay is %v; it must be positive", o.MinRetryDelay)
	case o.SettleTimeout < 0:
		return wrapConfig("SettleTimeout is %v; it must be positive", o.SettleTimeout)
	case o.DeadLetterTopic == "" && !o.DropPoison:
		return wrapConfig("neither Options.DeadLetterTopic nor Options.DropPoison is set (nil Options set neither): poison messages would be lost; set a DeadLetterTopic, or DropPoison to drop them on purpose (logged and counted)")
	case o.DeadLetterTopic != "" && o.DropPoison:
		return wrapConfig("DropPoison is set with DeadLetterTopic %q; choose one", o.DeadLetterTopic)
	case o.RevokeTimeout < 0:
		return wrapConfig("RevokeTimeout is %v; it must be positive", o.RevokeTimeout)
	}
	for i, t := range o.RetryTopics {
		switch {
		case t <= 0:
			return wrapConfig("RetryTopics[%d] is %v; tiers must be positive", i, t)
		case i > 0 && t <= o.RetryTopics[i-1]:
			return wrapConfig("RetryTopics must be distinct and shortest first; %v follows %v", t, o.RetryTopics[i-1])
		}
	}
	return nil
}

func wrapConfig(format string, args ...any) error {
	return fmt.Errorf("dedupfranz: %w: %s", dedup.ErrInvalidConfig, fmt.Sprintf(format, args...))
}
