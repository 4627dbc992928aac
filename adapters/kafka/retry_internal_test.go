package dedupkafka

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
)

// TestTierFor: only handler errors go to a retry topic, from the smallest
// tier on; the delay is rounded up to a tier and capped at the largest. A
// message in flight elsewhere, a store that is down and a shutdown are
// retried in place whatever their delay.
func TestTierFor(t *testing.T) {
	t.Parallel()
	tiers := []time.Duration{time.Second, time.Minute}
	retry := func(reason dedup.Reason, d time.Duration) dedup.Decision {
		return dedup.Decision{Action: dedup.Retry, Reason: reason, Delay: d}
	}
	for _, c := range []struct {
		d    dedup.Decision
		tier time.Duration
		ok   bool
	}{
		{retry(dedup.ReasonHandlerError, 999*time.Millisecond), 0, false},
		{retry(dedup.ReasonHandlerError, time.Second), time.Second, true},
		{retry(dedup.ReasonHandlerError, 2*time.Second), time.Minute, true},
		{retry(dedup.ReasonHandlerError, time.Hour), time.Minute, true},
		{retry(dedup.ReasonInFlight, time.Hour), 0, false},
		{retry(dedup.ReasonStoreUnavailable, time.Hour), 0, false},
		{retry(dedup.ReasonCanceled, time.Hour), 0, false},
		{dedup.Decision{Action: dedup.DeadLetter, Reason: dedup.ReasonHandlerError, Delay: time.Hour}, 0, false},
	} {
		tier, ok := tierFor(tiers, c.d)
		require.Equal(t, c.ok, ok, "%+v", c.d)
		require.Equal(t, c.tier, tier, "%+v", c.d)
	}
	_, ok := tierFor(nil, retry(dedup.ReasonHandlerError, time.Hour))
	require.False(t, ok, "no tiers: always in place")
}
