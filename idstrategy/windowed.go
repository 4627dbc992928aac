package idstrategy

import (
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
)

// Windowed makes inner's id unique per time window: the id is inner's id, '@'
// and the start of the window that at(m) falls in, in UTC RFC 3339 (with
// fractions of a second only when the window has them), such as
// "report-daily@2024-05-01T00:00:00Z". Use it for messages that legitimately
// repeat, such as a daily report request: one per day is processed, repeats
// within the day are duplicates.
//
// Windows are aligned to multiples of window since January 1, year 1, UTC (as
// time.Time.Truncate does), whatever at's location: a window that divides 24
// hours starts at UTC midnight, and a 7*24h window starts on Monday. The id
// stays unambiguous when inner's id contains '@', because the window never
// does: it follows the last '@'.
//
// Take the time from the message (the event or publish time), not from the
// clock: a redelivery next day must fall in the same window as the first
// delivery. A zero time fails with dedup.ErrNoKey.
//
// It panics if inner or at is nil, or if window is not positive (as
// time.NewTicker does): see the package documentation for why configuration
// errors panic instead of failing every message.
func Windowed[M any](inner dedup.KeyFunc[M], window time.Duration, at func(M) time.Time) dedup.KeyFunc[M] {
	switch {
	case inner == nil:
		misconfigured("Windowed", "inner is nil")
	case at == nil:
		misconfigured("Windowed", "at is nil")
	case window <= 0:
		misconfigured("Windowed", "window is %v; it must be positive", window)
	}
	const strategy = "windowed"
	return func(m M) (string, error) {
		id, err := recoverLong(inner(m))
		if err != nil {
			return "", within(strategy, err)
		}
		if id == "" {
			// Only a hand-written inner gets here; without the check all its
			// messages would share the id "@" + window.
			return "", noKey(strategy, "the inner strategy returned an empty id")
		}
		t := at(m)
		if t.IsZero() {
			return "", noKey(strategy, "the message has no time (at returned the zero time)")
		}
		id = id + "@" + t.Truncate(window).UTC().Format(time.RFC3339Nano)
		if err := check(strategy, id, adapter.DefaultMaxIDLength); err != nil {
			return "", err
		}
		return id, nil
	}
}
