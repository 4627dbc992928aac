package dedup

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Backoff gives the retry delay after a failed attempt (1 for the first).
type Backoff interface {
	Delay(attempt int) time.Duration
}

// BackoffFunc adapts a function to Backoff.
type BackoffFunc func(attempt int) time.Duration

// Delay calls f.
func (f BackoffFunc) Delay(attempt int) time.Duration { return f(attempt) }

// ExponentialBackoff waits Base after the first attempt and doubles with
// each further attempt up to Max, less up to 20% at random (jitter), so
// that a burst of failures does not retry in lockstep: a delay is between
// 80% and 100% of Base times a power of two, and never more than Max.
// NewReceiver rejects a non-positive Base or a Max below Base.
type ExponentialBackoff struct {
	Base, Max time.Duration
}

// Delay returns the delay after attempt.
func (b ExponentialBackoff) Delay(attempt int) time.Duration {
	if b.Base <= 0 {
		return 0
	}
	d := b.Base
	for i := 1; i < attempt && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, max(b.Max, b.Base))
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}

func (b ExponentialBackoff) validate() error {
	switch {
	case b.Base <= 0:
		return fmt.Errorf("%w: ExponentialBackoff.Base is %v; it must be positive", ErrInvalidConfig, b.Base)
	case b.Max < b.Base:
		return fmt.Errorf("%w: ExponentialBackoff.Max is %v, below Base %v", ErrInvalidConfig, b.Max, b.Base)
	}
	return nil
}

var (
	_ Backoff = ExponentialBackoff{}
	_ Backoff = BackoffFunc(nil)
)
