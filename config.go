package dedup

import (
	"cmp"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"time"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
)

// Default values of Config, as its fields' documentation gives them.
const (
	defaultNamespace       = "default"
	defaultLease           = 30 * time.Second
	defaultRetention       = 24 * time.Hour
	defaultMaxAttempts     = 5
	defaultMaxResultSize   = 64 << 10
	defaultStoreRetryDelay = 5 * time.Second

	// minLease is the shortest lease accepted: the heartbeat beats at a
	// third of it.
	minLease = 3 * time.Millisecond
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
	// 3ms. Defaults to 30s.
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

	// NoWait makes every delivery ask the store at once, instead of
	// waiting for another delivery of its key in this process and sharing
	// its outcome: a key held anywhere, this process included, is
	// StatusInFlight at once, and a completed key is replayed from its
	// record. HTTP and gRPC middleware set it: a request must not block on
	// another. Defaults to false: wait.
	NoWait bool

	// Codec encodes handler results for the store and decodes them for
	// duplicates. Defaults to JSONCodec.
	Codec Codec

	// MaxResultSize is the largest encoded result stored, in bytes. A larger
	// one is not stored: the record completes without it (see
	// ErrResultNotStored). Defaults to 64 KiB.
	MaxResultSize int

	// MaxIDLength is the longest message id accepted, in bytes. Defaults to
	// 512.
	MaxIDLength int

	// Backoff is the retry delay after a failed attempt. Defaults to
	// ExponentialBackoff{Base: time.Second, Max: 5 * time.Minute}.
	Backoff Backoff

	// StoreRetryDelay is the retry delay Decide gives a delivery refused
	// because the store is unavailable. Defaults to 5s.
	StoreRetryDelay time.Duration

	// StoreTimeout bounds each completion attempt and each release, which
	// run detached from the caller's context so that a shutdown cannot
	// lose a success. It is at most a fifth of the Lease, so that several
	// completion attempts fit within the lease whatever its length (a
	// larger value is lowered to that): an outage shorter than the lease
	// then costs retries, never the record. A store that never waits
	// (store.InProcess: memstore), or that bounds its own calls within
	// StoreTimeout (store.Bounded: redisstore and pgstore, and tieredstore
	// over either), is not bounded again. Defaults to a fifth of the Lease.
	StoreTimeout time.Duration

	// Logger receives what a user must see: bypassed deliveries, lost
	// leases, results not stored, store errors, recovered panics. Defaults
	// to slog.Default().
	Logger *slog.Logger

	// Observer hears of every outcome (see Event). Defaults to nil: none.
	Observer delivery.Observer

	// Clock is the time source of leases and heartbeats. Tests inject a
	// clock.Fake. Defaults to clock.Real().
	Clock clock.Clock

	// Steps lets the handler run recorded steps (Step): NewReceiver then
	// requires a store that keeps step records (store.StepStore), and
	// fails with ErrStepsUnsupported otherwise. Set by Compensations too.
	// Defaults to false: Step fails with ErrStepsUnsupported.
	Steps bool

	// Compensations undo the steps of a message that is given up
	// (docs/steps.md): a Compensations map, by step name; a name ending
	// in "*" is a pattern for every step name with its prefix
	// ("reserve/*"), the longest pattern winning. A message is given up when Decide would
	// dead-letter its handler's error (a Permanent error, MaxAttempts
	// reached) or its claim is past MaxAttempts: before the handler's
	// error is returned, the compensations of its completed steps run in
	// the reverse order of their completion, each once and recorded, and
	// no step of the message starts any more. A step without a
	// compensation is left as it is. Each must take the receiver's message
	// type (NewReceiver checks). Defaults to none: a message given up is
	// dead-lettered with its steps' effects in place.
	Compensations CompensationSet
}

// withDefaults returns a copy of c with every zero field set to its default.
func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	out.Namespace = cmp.Or(out.Namespace, defaultNamespace)
	out.Lease = cmp.Or(out.Lease, defaultLease)
	out.Retention = cmp.Or(out.Retention, defaultRetention)
	out.MaxAttempts = cmp.Or(out.MaxAttempts, defaultMaxAttempts)
	out.MaxResultSize = cmp.Or(out.MaxResultSize, defaultMaxResultSize)
	out.MaxIDLength = cmp.Or(out.MaxIDLength, defaultMaxIDLength)
	out.StoreRetryDelay = cmp.Or(out.StoreRetryDelay, defaultStoreRetryDelay)
	out.StoreTimeout = min(cmp.Or(out.StoreTimeout, out.Lease/5), out.Lease/5)
	if isNilInterface(out.Codec) {
		out.Codec = JSONCodec{}
	}
	if isNilInterface(out.Backoff) {
		out.Backoff = ExponentialBackoff{Base: time.Second, Max: 5 * time.Minute}
	}
	if len(compensationsOf(out.Compensations)) > 0 {
		out.Steps = true
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if isNilInterface(out.Clock) {
		out.Clock = clock.Real()
	}
	return out
}

// validate checks a Config whose defaults are filled.
func (c *Config) validate() error {
	switch {
	case strings.Contains(c.Namespace, ":"):
		return fmt.Errorf("%w: Namespace %q contains ':', which would make keys ambiguous", ErrInvalidConfig, c.Namespace)
	case c.Lease < minLease:
		return fmt.Errorf("%w: Lease is %v; it must be at least %v", ErrInvalidConfig, c.Lease, minLease)
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
	case c.StoreTimeout < 0:
		return fmt.Errorf("%w: StoreTimeout is %v; it must be positive", ErrInvalidConfig, c.StoreTimeout)
	}
	if v, ok := c.Backoff.(interface{ validate() error }); ok {
		if err := v.validate(); err != nil {
			return err
		}
	}
	return nil
}

// isNilInterface reports whether v is nil or holds a nil pointer, map,
// func... (a typed nil, which would panic when used).
func isNilInterface(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
