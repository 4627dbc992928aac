package pgoutbox

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store"
)

// Defaults of RelayOptions.
const (
	DefaultBatchSize       = 4096
	DefaultLease           = 15 * time.Second
	DefaultPollInterval    = time.Second
	DefaultMinBackoff      = 100 * time.Millisecond
	DefaultMaxBackoff      = 10 * time.Second
	DefaultRetention       = time.Hour
	DefaultCleanupInterval = time.Minute
	DefaultCleanupBatch    = 1000
)

// RelayOptions configures a Relay. A nil *RelayOptions means all
// defaults; a zero field takes its default.
type RelayOptions struct {
	// BatchSize is the most messages one fetch reads. A relay reads the
	// next batch while the tail of the current one is published, and
	// holds up to BatchSize + 1024 messages (bodies included) in memory:
	// lower it when bodies are large. Smaller batches cost more reads
	// (each fetch reads again what the relay holds and has not settled,
	// up to 512 messages). Defaults to 4096, the fastest of the
	// benchmark's sizes on every broker (docs/performance.md).
	BatchSize int

	// Lease is how long a relay holds a bucket of ordering keys without
	// renewing it; it renews every third of it. A relay killed leaves its
	// buckets to the others once its leases end. Defaults to 15s.
	Lease time.Duration

	// PublishTimeout bounds each Publish call. At most a third of Lease,
	// so that a call fits between two renewals. Defaults to a third of
	// Lease.
	PublishTimeout time.Duration

	// PollInterval is how often the relay looks for messages when no
	// NOTIFY woke it: new messages go out within it when notifications
	// are off (Options.NoNotify) or lost (the listening connection down).
	// Defaults to 1s.
	PollInterval time.Duration

	// MinBackoff and MaxBackoff bound the wait after a failed pump (the
	// broker down, the database down): it doubles from MinBackoff with
	// each failure in a row, up to MaxBackoff, with a jitter of up to a
	// fifth less. Default to 100ms and 10s.
	MinBackoff, MaxBackoff time.Duration

	// Retention is how long the id of a message is kept after it was
	// written (and at least until it was sent), so that a handler that
	// runs again within it does not write the message again (see
	// Writer.Add); the message itself is deleted when marked sent. Keep
	// it at least as long as a handler may run again for the same
	// incoming message. Defaults to 1h.
	Retention time.Duration

	// CleanupInterval is how often a relay deletes the ids past the
	// retention, in statements of at most CleanupBatch rows. Default to
	// 1m and 1000.
	CleanupInterval time.Duration
	CleanupBatch    int

	// HoldRefused makes the relay hold back the ordering key of a message
	// the broker refused for good (an error matching
	// outbox.ErrPermanent), as it does behind any other failure, until an
	// operator deletes or fixes the row: order per key over progress.
	// Defaults to false: the message is set aside in the dead table
	// (Table_dead, with its error), reported (EventDead, Stats().Dead, an
	// error log), and the key's next messages go on.
	HoldRefused bool

	// Observer hears what the relay does (outbox.Event). Defaults to none.
	Observer outbox.Observer

	// Logger receives failures (warn: a step that failed; error: messages
	// set aside as dead, a stop nobody asked for). Defaults to the
	// Outbox's Options.Logger.
	Logger *slog.Logger
}

type relayConfig struct {
	batch           int
	lease           time.Duration
	publishTimeout  time.Duration
	poll            time.Duration
	minBackoff      time.Duration
	maxBackoff      time.Duration
	retention       time.Duration
	cleanupInterval time.Duration
	cleanupBatch    int
	holdRefused     bool
	observer        outbox.Observer
	logger          *slog.Logger
}

func (o *RelayOptions) config(logger *slog.Logger) (relayConfig, error) {
	var opts RelayOptions
	if o != nil {
		opts = *o
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"BatchSize", int64(opts.BatchSize)}, {"Lease", int64(opts.Lease)}, {"PublishTimeout", int64(opts.PublishTimeout)},
		{"PollInterval", int64(opts.PollInterval)}, {"MinBackoff", int64(opts.MinBackoff)}, {"MaxBackoff", int64(opts.MaxBackoff)},
		{"Retention", int64(opts.Retention)}, {"CleanupInterval", int64(opts.CleanupInterval)}, {"CleanupBatch", int64(opts.CleanupBatch)},
	} {
		if f.v < 0 {
			return relayConfig{}, fmt.Errorf("pgoutbox: %w: RelayOptions.%s is %d, it must not be negative", store.ErrInvalidConfig, f.name, f.v)
		}
	}
	c := relayConfig{
		batch:           cmp.Or(opts.BatchSize, DefaultBatchSize),
		lease:           cmp.Or(opts.Lease, DefaultLease),
		poll:            cmp.Or(opts.PollInterval, DefaultPollInterval),
		minBackoff:      cmp.Or(opts.MinBackoff, DefaultMinBackoff),
		maxBackoff:      cmp.Or(opts.MaxBackoff, DefaultMaxBackoff),
		retention:       cmp.Or(opts.Retention, DefaultRetention),
		cleanupInterval: cmp.Or(opts.CleanupInterval, DefaultCleanupInterval),
		cleanupBatch:    cmp.Or(opts.CleanupBatch, DefaultCleanupBatch),
		holdRefused:     opts.HoldRefused,
		observer:        opts.Observer,
		logger:          cmp.Or(opts.Logger, logger),
	}
	c.publishTimeout = cmp.Or(opts.PublishTimeout, c.lease/3)
	switch {
	case c.publishTimeout > c.lease/3:
		return relayConfig{}, fmt.Errorf("pgoutbox: %w: RelayOptions.PublishTimeout %v is over a third of Lease %v", store.ErrInvalidConfig, c.publishTimeout, c.lease)
	case c.maxBackoff < c.minBackoff:
		return relayConfig{}, fmt.Errorf("pgoutbox: %w: RelayOptions.MaxBackoff %v is under MinBackoff %v", store.ErrInvalidConfig, c.maxBackoff, c.minBackoff)
	}
	return c, nil
}
