// Package clock is the time source of dedup: the real clock, and a fake one
// that tests (and the quickstart) advance by hand instead of sleeping.
//
// The receiver arms its lease heartbeat with [Clock.AfterFunc], and stores
// such as memstore read [Clock.Now] to expire leases and records, so one
// [Fake] drives the whole state machine deterministically.
package clock

import "time"

// Clock tells the time and runs functions later.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has elapsed, unless the
	// returned Timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending call from [Clock.AfterFunc].
type Timer interface {
	// Stop prevents the call from running. It reports whether it did so:
	// false means the call already ran or was already stopped.
	Stop() bool
}

// Real returns the wall clock, backed by the time package.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
