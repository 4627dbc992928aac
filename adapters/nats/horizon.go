package nats

import (
	"fmt"
	"time"

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

// checkHorizon compares the consumer's horizon with the retention. It
// returns a description of the problem, or "".
func checkHorizon(cfg jetstream.ConsumerConfig, retention time.Duration) string {
	h, ok := Horizon(cfg)
	switch {
	case !ok:
		return fmt.Sprintf("consumer %q redelivers without limit (MaxDeliver %d), so no retention (%v) covers its redeliveries; set MaxDeliver", cfg.Durable+cfg.Name, cfg.MaxDeliver, retention)
	case h > retention:
		return fmt.Sprintf("consumer %q may redeliver for %v (AckWait %v, MaxDeliver %d, BackOff %v), longer than the receiver's retention %v: a late redelivery would run the handler again", cfg.Durable+cfg.Name, h, cfg.AckWait, cfg.MaxDeliver, cfg.BackOff, retention)
	}
	return ""
}
