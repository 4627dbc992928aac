package memcore

import (
	"time"

	"github.com/dedup-go/dedup/clock"
)

// since returns how long it is since t on c. On the real clock it reads
// only the monotonic clock (time.Since of a t that has its reading), which
// costs half of a full Now on most machines: Peek calls it on the
// duplicate path to check an expiry, as an offset from the store's epoch.
//
// clock.Real returns a comparable zero struct, so the comparison is exact
// and never panics: interfaces of different dynamic types are unequal.
func since(c clock.Clock, t time.Time) time.Duration {
	if c == clock.Real() {
		return time.Since(t)
	}
	return c.Now().Sub(t)
}
