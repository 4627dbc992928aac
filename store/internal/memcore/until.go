package memcore

import (
	"time"

	"github.com/dedup-go/dedup/clock"
)

// until returns how long until t on c. On the real clock it reads only the
// monotonic clock (time.Until), which costs half of a full Now on most
// machines: Peek calls it on the duplicate path to check an expiry.
//
// clock.Real returns a comparable zero struct, so the comparison is exact
// and never panics: interfaces of different dynamic types are unequal.
func until(c clock.Clock, t time.Time) time.Duration {
	if c == clock.Real() {
		return time.Until(t)
	}
	return t.Sub(c.Now())
}
