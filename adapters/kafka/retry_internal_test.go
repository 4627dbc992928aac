package dedupkafka

import (
	"testing"
	"time"

	"github.com/dedup-go/dedup/delivery"
	"github.com/stretchr/testify/require"
)

// TestTierFor: only handler errors go to a retry topic, from the smallest
// tier on; the delay is rounded up to a tier and capped at the largest. A
// message in flight elsewhere, a store that is down and a shutdown are
// retried in place whatever their delay.
func TestTierFor(t *testing.T) {
	t.Parallel()
	tiers := []time.Duration{time.Second, time.Minute}
	retry := func(reason delivery.Reason, d time.Duration) delivery.Decision {
		return delivery.Decision{Action: delivery.Retry, Reason: reason, Delay: d}
	}
	for _, c := range []struct {
		d    delivery.Decision
		tier time.Duration
		ok   bool
	}{
		{retry(delivery.ReasonHandlerError, 999*time.Millisecond), 0, false},
		{retry(delivery.ReasonHandlerError, time.Second), time.Second, true},
		{retry(delivery.ReasonHandlerError, 2*time.Second), time.Minute, true},
		{retry(delivery.ReasonHandlerError, time.Hour), time.Minute, true},
		{retry(delivery.ReasonInFlight, time.Hour), 0, false},
		{retry(delivery.ReasonStoreUnavailable, time.Hour), 0, false},
		{retry(delivery.ReasonCanceled, time.Hour), 0, false},
		{delivery.Decision{Action: delivery.DeadLetter, Reason: delivery.ReasonHandlerError, Delay: time.Hour}, 0, false},
	} {
		tier, ok := tierFor(tiers, c.d)
		require.Equal(t, c.ok, ok, "%+v", c.d)
		require.Equal(t, c.tier, tier, "%+v", c.d)
	}
	_, ok := tierFor(nil, retry(delivery.ReasonHandlerError, time.Hour))
	require.False(t, ok, "no tiers: always in place")
}
