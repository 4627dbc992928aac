package dedup

import (
	"cmp"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/dedup-go/dedup/clock"
)

// Default values of Config.
const (
	DefaultNamespace       = "default"
	DefaultLease           = 30 * time.Second
	DefaultRetention       = 24 * time.Hour
	DefaultMaxAttempts     = 5
	DefaultMaxResultSize   = 64 << 10
	DefaultStoreRetryDelay = 5 * time.Second

	// MinLease is the shortest lease accepted: the heartbeat beats at a
	// third of it.
	MinLease = 3 * time.Millisecond
)

// Config configures a Receiver. A nil *Config means all defaults. A zero
// field takes its default; a value out of range makes NewReceiver fail with
// an error matching ErrInvalidConfig.
type Config struct {
	// Namespace separates the records of one consuming service (or consumer
	// group, or tenant) from every other: keys are "namespace:id", so two
	// services consuming the same message never deduplicate against each
	// other. It must not contain ':'. Defaults to "default"; set it.
	Namespace string

	// Lease is how long a claim holds a key before another delivery may take
	// it over (a worker that crashed mid-handler). While the handler runs
	// longer than a third of it, the receiver extends it. Must be at least
	// MinLease. Defaults to 30s.
	Lease time.Duration

	// Retention is how long a completed or failed record is kept: a duplicate
	// arriving later than this is processed again. Make it longer than the
	// broker's redelivery horizon. Defaults to 24h.
	Retention time.Duration

	// MaxAttempts is how many times the handler may fail (or its worker
	// crash) for one key before the message is dead-lettered. Defaults to 5.
	MaxAttempts int

	// FailOpen makes the handler run without protection (status Bypassed)
	// when the store is unavailable. Otherwise (fail-closed) the delivery is
	// refused with ErrStoreUnavailable and retried later. Defaults to false:
	// fail-closed.
	FailOpen bool

	// Codec encodes handler results for the store and decodes them for
	// duplicates. Defaults to JSON.
	Codec Codec

	// MaxResultSize is the largest encoded result stored, in bytes. A larger
	// one is not stored: the record completes without it (see
	// ErrResultNotStored). Defaults to 64 KiB.
	MaxResultSize int

	// MaxIDLength is the longest message id accepted, in bytes. Defaults to
	// DefaultMaxIDLength (512).
	MaxIDLength int

	// Backoff returns how long to wait before retrying after the given failed
	// attempt (1 for the first). Defaults to exponential backoff from 1s,
	// doubling up to 5m, with up to 20% jitter.
	Backoff func(attempt int) time.Duration

	// StoreRetryDelay is the retry delay Decide gives a delivery refused
	// because the store is unavailable. Defaults to 5s.
	StoreRetryDelay time.Duration

	// Logger receives warnings: bypassed deliveries, lost leases, results not
	// stored, store errors. Defaults to discarding everything.
	Logger *slog.Logger

	// Clock is the time source of leases and heartbeats. Tests inject a
	// clock.Fake. Defaults to clock.Real().
	Clock clock.Clock
}

// withDefaults returns a copy of c with every zero field set to its default.
func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	out.Namespace = cmp.Or(out.Namespace, DefaultNamespace)
	out.Lease = cmp.Or(out.Lease, DefaultLease)
	out.Retention = cmp.Or(out.Retention, DefaultRetention)
	out.MaxAttempts = cmp.Or(out.MaxAttempts, DefaultMaxAttempts)
	out.MaxResultSize = cmp.Or(out.MaxResultSize, DefaultMaxResultSize)
	out.MaxIDLength = cmp.Or(out.MaxIDLength, DefaultMaxIDLength)
	out.StoreRetryDelay = cmp.Or(out.StoreRetryDelay, DefaultStoreRetryDelay)
	if out.Codec == nil {
		out.Codec = JSON{}
	}
	if out.Backoff == nil {
		out.Backoff = ExponentialBackoff(time.Second, 5*time.Minute)
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.Clock == nil {
		out.Clock = clock.Real()
	}
	return out
}

// validate checks a Config whose defaults are filled.
func (c *Config) validate() error {
	switch {
	case strings.Contains(c.Namespace, ":"):
		return fmt.Errorf("%w: Namespace %q contains ':', which would make keys ambiguous", ErrInvalidConfig, c.Namespace)
	case c.Lease < MinLease:
		return fmt.Errorf("%w: Lease is %v; it must be at least %v", ErrInvalidConfig, c.Lease, MinLease)
	case c.Retention <= 0:
		return fmt.Errorf("%w: Retention is %v; it must be positive", ErrInvalidConfig, c.Retention)
	case c.MaxAttempts < 0:
		return fmt.Errorf("%w: MaxAttempts is %d; it must be positive", ErrInvalidConfig, c.MaxAttempts)
	case c.MaxResultSize < 0:
		return fmt.Errorf("%w: MaxResultSize is %d; it must be positive", ErrInvalidConfig, c.MaxResultSize)
	case c.MaxIDLength < 0:
		return fmt.Errorf("%w: MaxIDLength is %d; it must be positive", ErrInvalidConfig, c.MaxIDLength)
	case c.StoreRetryDelay < 0:
		return fmt.Errorf("%w: StoreRetryDelay is %v; it must be positive", ErrInvalidConfig, c.StoreRetryDelay)
	}
	return nil
}

// ExponentialBackoff returns a backoff that waits base after the first
// attempt, doubles with each further attempt up to max, and adds up to 20%
// random jitter so that a burst of failures does not retry in lockstep.
func ExponentialBackoff(base, max time.Duration) func(attempt int) time.Duration {
	return func(attempt int) time.Duration {
		d := base
		for i := 1; i < attempt && d < max; i++ {
			d *= 2
		}
		d = min(d, max)
		return d + time.Duration(rand.Int64N(int64(d)/5+1))
	}
}
