package dedupnats

import (
	"cmp"
	"log/slog"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
)

// Defaults of Options, as their documentation says.
const (
	defaultConcurrency   = 8
	defaultPrefetch      = 128
	defaultMinRetryDelay = 100 * time.Millisecond
	defaultSettleTimeout = 10 * time.Second
)

// ReasonMaxDeliver is the reason of a message dead-lettered because its
// decision was to retry but JetStream would not deliver it again
// (NumDelivered reached the consumer's MaxDeliver). Without the dead letter,
// it would stay unacknowledged and be lost to the consumer.
const ReasonMaxDeliver delivery.Reason = "max-deliver"

// ReasonNoRedelivery is the reason of a core NATS message (not a request)
// dead-lettered because its decision was to retry, which core NATS cannot
// do: the dead letter is the only copy left.
const ReasonNoRedelivery delivery.Reason = "no-redelivery"

// Options configure a Consumer or a Subscriber. A nil *Options means all
// defaults. DeadLetterSubject has none: NewConsumer and NewSubscriber
// refuse options without it (nil ones included), unless DropPoison is set,
// with an error matching ErrNoDeadLetter that names the field.
//
// There is no callback among them: what each delivery came to is reported
// to the receiver's dedup.Config.Observer, once it is settled, as one
// delivery.Event whose Broker is BrokerJetStream or BrokerNATS, Source the
// subject, Decision what was done (its Reason is ReasonMaxDeliver or
// ReasonNoRedelivery when the adapter turned a retry into a dead letter),
// and SettleErr the error that kept it from being done (a failed Ack or
// dead-letter publish); see the package documentation.
type Options struct {
	// Concurrency is how many messages are handled at once. Defaults to 8.
	Concurrency int

	// Prefetch is how many JetStream messages the client pulls ahead of the
	// workers (PullMaxMessages). Each waits in the buffer with its AckWait
	// running, so keep it small next to AckWait x throughput. Defaults to
	// 128.
	Prefetch int

	// DeadLetterSubject receives poison messages (undecodable, no id,
	// permanent errors, attempts exhausted, key reused): the original data
	// and headers, plus Dedup-* headers saying why (see the package
	// documentation). A stream must capture it, and not the consumer's own
	// stream (which would feed the dead letters back to the consumer):
	// Start looks it up and fails with ErrDeadLetterStream otherwise, as
	// NewSubscriber does for a subject its subscription matches. Each
	// publish waits for that stream's acknowledgement before the message is
	// terminated, so that nothing is lost. It must be a subject without
	// wildcards. It has no default: without it, NewConsumer and
	// NewSubscriber fail with ErrNoDeadLetter, unless DropPoison is set.
	DeadLetterSubject string

	// DropPoison lets a consumer or subscriber run without
	// DeadLetterSubject: each poison message is then terminated (JetStream)
	// or dropped (core NATS), logged at error level with its stream and
	// sequence, and counted in Stats().PoisonDropped. Defaults to false.
	DropPoison bool

	// CoreDeadLetters lets DeadLetterSubject be a subject no stream
	// captures: dead letters are then published on core NATS and flushed,
	// which reaches only whoever subscribes at that moment (nobody: the
	// message is gone). Start logs a warning. Defaults to false: Start
	// fails with ErrDeadLetterStream.
	CoreDeadLetters bool

	// Decoder decodes the body into the handler's type. Defaults to
	// dedup.JSONDecoder (strict: an empty body or one that is not valid
	// UTF-8 is undecodable); dedup.RawDecoder hands []byte or string bodies
	// over as they are.
	Decoder dedup.Decoder

	// Fingerprint stores a SHA-256 of the data with each record, so that a
	// message carrying an id already used with other data is dead-lettered
	// as key-reused instead of answered with the other message's result.
	// Defaults to false.
	Fingerprint bool

	// AckSync waits for the server to confirm each JetStream Ack
	// (DoubleAck). A lost Ack only causes a redelivery, which dedup answers
	// as a duplicate, so this mostly costs a round trip. Defaults to false.
	AckSync bool

	// MinRetryDelay is the shortest NakWithDelay delay, so that a message
	// in flight elsewhere whose lease is about to end does not spin.
	// Defaults to 100ms.
	MinRetryDelay time.Duration

	// SettleTimeout bounds each Ack, Nak, Term, reply and dead-letter
	// publish, which run even while the consumer stops. Defaults to 10s.
	SettleTimeout time.Duration

	// StrictHorizon makes Start fail with ErrHorizon when the retention is
	// shorter than the consumer's redelivery horizon (or the horizon is
	// unbounded). Defaults to false: a warning is logged.
	StrictHorizon bool

	// PendingMsgsLimit and PendingBytesLimit bound what a Subscriber's
	// subscription buffers while its workers are busy (nats.go's
	// SetPendingLimits; a negative value is no limit). Past them, core NATS
	// drops messages (a slow consumer): the Subscriber logs each drop at
	// error level and counts it in Stats().SlowConsumerDropped. JetStream
	// consumers ignore them (Prefetch bounds their buffer). Default to
	// nats.go's 512K messages and 64 MiB.
	PendingMsgsLimit  int
	PendingBytesLimit int

	// DestinationTemplate names the destination of every delivery by a
	// template, its form without ids (delivery.Origin.DestinationTemplate,
	// messaging.destination.template to dedupotel, which names the spans
	// after it and leaves the subject off the metrics when it differs),
	// for subjects that carry one ("orders.*" for orders.<id>). Defaults
	// to, for a Consumer, the filter subject of the JetStream consumer
	// that the message's subject matches, or, without filters, the
	// stream's subject it matches (the stream's name when none does); for
	// a Subscriber, its subject. A literal subject is its own template.
	DestinationTemplate string

	// ReplyEncoder encodes a handler's result into the body of a
	// Subscriber's reply to a request (a Consumer ignores it). Defaults to
	// sending a []byte, string or json.RawMessage result as it is, and
	// anything else as JSON.
	ReplyEncoder ReplyEncoder

	// Logger receives warnings and errors (dropped poison, slow-consumer
	// drops, failed acks and dead-letter publishes, the horizon check). Defaults
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
	out.Prefetch = cmp.Or(out.Prefetch, defaultPrefetch)
	out.MinRetryDelay = cmp.Or(out.MinRetryDelay, defaultMinRetryDelay)
	out.SettleTimeout = cmp.Or(out.SettleTimeout, defaultSettleTimeout)
	if out.Decoder == nil {
		out.Decoder = dedup.JSONDecoder{}
	}
	if out.ReplyEncoder == nil {
		out.ReplyEncoder = defaultReplyEncoder{}
	}
	out.Logger = cmp.Or(out.Logger, logger)
	return out
}

func (o *Options) validate() error {
	switch {
	case o.Concurrency < 0:
		return wrapConfig("Concurrency is %d; it must be positive", o.Concurrency)
	case o.Prefetch < 0:
		return wrapConfig("Prefetch is %d; it must be positive", o.Prefetch)
	case o.MinRetryDelay < 0:
		return wrapConfig("MinRetryDelay is %v; it must be positive", o.MinRetryDelay)
	case o.SettleTimeout < 0:
		return wrapConfig("SettleTimeout is %v; it must be positive", o.SettleTimeout)
	case o.DeadLetterSubject != "" && !validPublishSubject(o.DeadLetterSubject):
		return wrapConfig("DeadLetterSubject %q is not a subject one can publish to (no wildcards, spaces or empty tokens)", o.DeadLetterSubject)
	case o.DeadLetterSubject != "" && o.DropPoison:
		return wrapConfig("DropPoison and DeadLetterSubject are both set; choose one")
	case o.DeadLetterSubject == "" && !o.DropPoison:
		return &configError{sentinel: ErrNoDeadLetter, msg: "dedupnats: Options.DeadLetterSubject is missing (it has no default): a poison message would be lost; set it to a subject a stream of its own captures, or set DropPoison"}
	}
	return nil
}
