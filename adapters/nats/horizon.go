package dedupnats

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"

	"github.com/nats-io/nats.go/jetstream"
)

// defaultAckWait is what JetStream uses when a consumer sets no AckWait.
const defaultAckWait = 30 * time.Second

// Horizon returns how long after its first delivery JetStream may still
// redeliver a message that is never acknowledged, from a consumer's
// configuration: the sum of the BackOff schedule over MaxDeliver deliveries
// (its last entry repeated), or AckWait x MaxDeliver without one. It reports
// false when the horizon is unbounded (MaxDeliver -1 or 0: unlimited).
//
// A duplicate of a completed message that arrives after the receiver's
// retention is processed again, so the retention must be at least this.
func Horizon(cfg jetstream.ConsumerConfig) (time.Duration, bool) {
	if cfg.MaxDeliver <= 0 {
		return 0, false
	}
	if len(cfg.BackOff) > 0 {
		var sum time.Duration
		for i := range cfg.MaxDeliver {
			sum += cfg.BackOff[min(i, len(cfg.BackOff)-1)]
		}
		return sum, true
	}
	wait := cfg.AckWait
	if wait <= 0 {
		wait = defaultAckWait
	}
	return wait * time.Duration(cfg.MaxDeliver), true
}

// ackWaitOf is how long JetStream waits for an acknowledgement of the
// delivery after i earlier ones: the BackOff entry (its last one repeated),
// else AckWait.
func ackWaitOf(cfg jetstream.ConsumerConfig, i int) time.Duration {
	if len(cfg.BackOff) > 0 {
		return cfg.BackOff[min(i, len(cfg.BackOff)-1)]
	}
	if cfg.AckWait <= 0 {
		return defaultAckWait
	}
	return cfg.AckWait
}

// shortestAckWait is the shortest time JetStream gives any delivery before
// it redelivers: the first InProgress must come before it.
func shortestAckWait(cfg jetstream.ConsumerConfig) time.Duration {
	shortest := ackWaitOf(cfg, 0)
	if cfg.AckWait > 0 {
		shortest = min(shortest, cfg.AckWait)
	}
	for _, b := range cfg.BackOff {
		shortest = min(shortest, b)
	}
	return shortest
}

// horizonLimits are what Start checks a consumer's configuration against:
// the receiver's retention and lease, and the longest NakWithDelay the
// adapter may send (a Nak postpones the next delivery by its delay, past
// AckWait when longer).
type horizonLimits struct {
	retention, lease, longestNak time.Duration
}

// checkHorizon compares the consumer's redelivery horizon, Nak delays
// included, with the retention, and its AckWait with a third of the lease
// (the heartbeat's InProgress must come first). It returns a description
// of the problems, or "".
func checkHorizon(name string, cfg jetstream.ConsumerConfig, lim horizonLimits) string {
	var problems []string
	if cfg.MaxDeliver <= 0 {
		problems = append(problems, fmt.Sprintf("consumer %q redelivers without limit (MaxDeliver %d), so no retention (%v) covers its redeliveries; set MaxDeliver", name, cfg.MaxDeliver, lim.retention))
	} else {
		// Each delivery waits its AckWait (or BackOff entry), or a Nak's
		// delay when longer; entries past the BackOff repeat its last.
		var h time.Duration
		listed := min(cfg.MaxDeliver, len(cfg.BackOff))
		for i := range listed {
			h += max(ackWaitOf(cfg, i), lim.longestNak)
		}
		if rest, each := time.Duration(cfg.MaxDeliver-listed), max(ackWaitOf(cfg, cfg.MaxDeliver-1), lim.longestNak); rest > 0 && each > (math.MaxInt64-h)/rest {
			h = math.MaxInt64 // saturated: longer than any retention
		} else {
			h += rest * each
		}
		if h > lim.retention {
			problems = append(problems, fmt.Sprintf("consumer %q may redeliver for %v (AckWait %v, MaxDeliver %d, BackOff %v, the adapter's Nak delays up to %v), longer than the receiver's retention %v: a late redelivery would run the handler again", name, h, cfg.AckWait, cfg.MaxDeliver, cfg.BackOff, lim.longestNak, lim.retention))
		}
	}
	if beat, wait := lim.lease/3, shortestAckWait(cfg); beat >= wait {
		problems = append(problems, fmt.Sprintf("consumer %q redelivers after AckWait %v, before the first heartbeat's InProgress (a third of the receiver's lease %v): a handler running past AckWait is redelivered while it works; lower Config.Lease or raise AckWait", name, wait, lim.lease))
	}
	return strings.Join(problems, "; ")
}

// longestNak is the longest NakWithDelay the adapter may send for rcv: a
// remaining lease (in flight elsewhere), StoreRetryDelay (store down,
// dead letter not published), or the receiver's backoff after any attempt
// below MaxAttempts (asked of its own Decide).
func longestNak[T, R any](rcv *adapter.Receiver[*dedup.Message[T], R], minRetry time.Duration) time.Duration {
	longest := max(rcv.Lease(), rcv.StoreRetryDelay(), minRetry)
	probe := errors.New("probe")
	for attempt := 1; attempt <= 1000; attempt++ {
		d := rcv.Decide(dedup.Result[R]{Attempt: attempt}, &dedup.HandlerError{Attempt: attempt, Err: probe})
		if d.Action != delivery.Retry {
			break
		}
		longest = max(longest, d.Delay)
	}
	return longest
}
