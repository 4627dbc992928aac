package dedupredisstream

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/dedup-go/dedup"
)

// Defaults of Options, as their documentation says.
const (
	defaultConcurrency   = 8
	defaultBatch         = 32
	defaultBlock         = time.Second
	defaultMinRetryDelay = 100 * time.Millisecond
	defaultSettleTimeout = 10 * time.Second
	defaultDataField     = "data"
	defaultIDField       = "message-id"
	defaultStartID       = "0"
	minDeadConsumerIdle  = 5 * time.Minute
)

// Options configure a Consumer. A nil *Options means all defaults.
// DeadLetterStream has none: NewConsumer refuses options without it (nil
// ones included), unless DropPoison is set, with an error matching
// ErrNoDeadLetter that names the field.
type Options struct {
	// Consumer is this process's consumer name in the group. It must stay
	// the same across restarts of one process (so that a restarted process
	// takes its own pending entries back at once) and differ between
	// processes (two processes under one name would share one pending
	// list): Start refuses a name another live Consumer holds
	// (ErrConsumerInUse), after waiting out a lock left by a crashed
	// holder (a few seconds). Defaults to the host name, "-" and the
	// process id: a container's host name is its pod's and its process id
	// 1, stable across its restarts.
	Consumer string

	// CreateGroup makes Start create the group (XGROUP CREATE ... MKSTREAM,
	// reading from StartID), and the stream if it does not exist; an
	// existing group is kept as it is. Defaults to false: Start checks that
	// the group exists and fails with ErrNoGroup otherwise.
	CreateGroup bool

	// StartID is where a group created by Start begins reading: "0" for
	// every entry already in the stream, "$" for the entries added from
	// now on. Defaults to "0", which loses nothing.
	StartID string

	// Concurrency is how many entries are handled at once. Defaults to 8.
	Concurrency int

	// Batch is how many entries one XREADGROUP or XAUTOCLAIM reads
	// (COUNT). Defaults to 32.
	Batch int

	// Block is how long one XREADGROUP waits for new entries (BLOCK): it
	// bounds how long Stop waits for the read in progress. Defaults to 1s.
	Block time.Duration

	// ClaimIdle is how long an entry must have been pending to a consumer
	// without a sign of life before this one takes it over (XAUTOCLAIM's
	// min-idle-time): a consumer that died, or stalled, inside its
	// handlers. A live Consumer keeps the entries it holds (queued, in a
	// handler, waiting for a retry's delay) from going idle, so they are
	// never raced for unless that upkeep runs more than a quarter of
	// ClaimIdle late (then the store answers the second consumer).
	// Defaults to the receiver's lease.
	ClaimIdle time.Duration

	// ClaimInterval is how often the pending entries of other consumers
	// are scanned for idle ones, the group's lag read and dead consumers
	// removed. A consumer killed inside a handler costs its entries at
	// most ClaimIdle plus ClaimInterval. Defaults to half of ClaimIdle.
	ClaimInterval time.Duration

	// DeadConsumerIdle is how long a consumer of the group must have been
	// silent, owning no pending entry, before it is removed from the group
	// (XGROUP DELCONSUMER): what restarted processes leave behind. Defaults
	// to ten times ClaimIdle, at least 5 minutes.
	DeadConsumerIdle time.Duration

	// DeadLetterStream receives poison entries (undecodable, no id,
	// permanent errors, attempts exhausted, key reused): a new entry with
	// the original's fields, plus Dedup-* fields saying why and which entry
	// it was (see the package documentation). The original is acknowledged
	// only once the dead letter's XADD returned. It has no default: without
	// it, NewConsumer fails with ErrNoDeadLetter, unless DropPoison is set.
	DeadLetterStream string

	// DropPoison lets a consumer run without DeadLetterStream: each poison
	// entry is then acknowledged without a copy, logged at error level with
	// its id, and counted in Stats().PoisonDropped. Defaults to false.
	DropPoison bool

	// DataField is the entry's field that holds the body. Defaults to
	// "data". An entry without it has an empty body (undecodable for
	// dedup.JSONDecoder).
	DataField string

	// IDField is the entry's field that holds the producer's message id
	// (dedup.Message.ID, for idstrategy.MessageID), which Producer and the
	// OutboxPublisher set. Defaults to "message-id".
	IDField string

	// Decoder decodes the body into the handler's type. Defaults to
	// dedup.JSONDecoder; dedup.RawDecoder hands []byte or string bodies
	// over as they are.
	Decoder dedup.Decoder

	// Fingerprint stores a SHA-256 of the body with each record, so that
	// an entry carrying an id already used with other data is dead-lettered
	// as key-reused. Defaults to false.
	Fingerprint bool

	// MinRetryDelay is the shortest delay of a retry. Defaults to 100ms.
	MinRetryDelay time.Duration

	// SettleTimeout bounds each XACK, dead-letter XADD and retry record,
	// which run even while the consumer stops. Defaults to 10s.
	SettleTimeout time.Duration

	// DestinationTemplate names the destination of every delivery
	// (delivery.Origin.DestinationTemplate). Defaults to the stream's key.
	DestinationTemplate string

	// Logger receives warnings and errors (trimmed entries, dropped
	// poison, failed acks and dead letters, lost connections). Defaults to
	// the receiver's logger (dedup.Config.Logger).
	Logger *slog.Logger
}

// withDefaults returns the options with their defaults filled in; logger
// and lease are the receiver's.
func (o *Options) withDefaults(logger *slog.Logger, lease time.Duration) Options {
	var out Options
	if o != nil {
		out = *o
	}
	out.Consumer = cmp.Or(out.Consumer, defaultConsumerName())
	out.StartID = cmp.Or(out.StartID, defaultStartID)
	out.Concurrency = cmp.Or(out.Concurrency, defaultConcurrency)
	out.Batch = cmp.Or(out.Batch, defaultBatch)
	out.Block = cmp.Or(out.Block, defaultBlock)
	out.ClaimIdle = cmp.Or(out.ClaimIdle, lease)
	out.ClaimInterval = cmp.Or(out.ClaimInterval, out.ClaimIdle/2)
	out.DeadConsumerIdle = cmp.Or(out.DeadConsumerIdle, max(10*out.ClaimIdle, minDeadConsumerIdle))
	out.DataField = cmp.Or(out.DataField, defaultDataField)
	out.IDField = cmp.Or(out.IDField, defaultIDField)
	out.MinRetryDelay = cmp.Or(out.MinRetryDelay, defaultMinRetryDelay)
	out.SettleTimeout = cmp.Or(out.SettleTimeout, defaultSettleTimeout)
	if out.Decoder == nil {
		out.Decoder = dedup.JSONDecoder{}
	}
	out.Logger = cmp.Or(out.Logger, logger)
	return out
}

func (o *Options) validate(stream string) error {
	switch {
	case o.Concurrency < 0:
		return wrapConfig("Concurrency is %d; it must be positive", o.Concurrency)
	case o.Batch < 0:
		return wrapConfig("Batch is %d; it must be positive", o.Batch)
	case o.Block < time.Millisecond:
		return wrapConfig("Block is %v; it must be at least 1ms (0 would block for ever)", o.Block)
	case o.ClaimIdle < time.Millisecond:
		return wrapConfig("ClaimIdle is %v; it must be at least 1ms", o.ClaimIdle)
	case o.ClaimInterval < time.Millisecond:
		return wrapConfig("ClaimInterval is %v; it must be at least 1ms", o.ClaimInterval)
	case o.DeadConsumerIdle < 0:
		return wrapConfig("DeadConsumerIdle is %v; it must be positive", o.DeadConsumerIdle)
	case o.MinRetryDelay < 0:
		return wrapConfig("MinRetryDelay is %v; it must be positive", o.MinRetryDelay)
	case o.SettleTimeout < 0:
		return wrapConfig("SettleTimeout is %v; it must be positive", o.SettleTimeout)
	case o.DataField == o.IDField:
		return wrapConfig("DataField and IDField are both %q", o.DataField)
	case o.StartID != "0" && o.StartID != "$" && !validID(o.StartID):
		return wrapConfig("StartID %q is not an entry id, \"0\" or \"$\"", o.StartID)
	case o.DeadLetterStream != "" && o.DropPoison:
		return wrapConfig("DropPoison and DeadLetterStream are both set; choose one")
	case o.DeadLetterStream != "" && o.DeadLetterStream == stream:
		return &configError{sentinel: ErrDeadLetterStream, msg: fmt.Sprintf("dedupredisstream: DeadLetterStream is the consumer's own stream %q: the consumer would read its dead letters back", stream)}
	case o.DeadLetterStream == "" && !o.DropPoison:
		return &configError{sentinel: ErrNoDeadLetter, msg: "dedupredisstream: Options.DeadLetterStream is missing (it has no default): a poison entry would be lost; set it to a stream of its own, or set DropPoison"}
	}
	return nil
}

// defaultConsumerName is the host name and the process id.
func defaultConsumerName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "consumer"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}
