package dedupnats

import "sync/atomic"

// Stats counts what a Consumer or Subscriber lost or changed at its edges,
// for metrics. Every count is also logged as it happens.
type Stats struct {
	// PoisonDropped counts poison messages terminated or dropped without a
	// dead letter (Options.DropPoison).
	PoisonDropped uint64
	// SlowConsumerDropped counts core NATS messages the client dropped
	// because the subscription's pending limits were exceeded (Subscriber
	// only; see Options.PendingMsgsLimit).
	SlowConsumerDropped uint64
	// DeadLettersTruncated counts dead letters whose data was cut (and
	// whose original headers were dropped, if they alone were too large) to
	// fit the server's max payload or the dead-letter stream's message
	// size.
	DeadLettersTruncated uint64
}

// counters are a Stats being counted.
type counters struct {
	poisonDropped, slowConsumerDropped, truncated atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		PoisonDropped:        c.poisonDropped.Load(),
		SlowConsumerDropped:  c.slowConsumerDropped.Load(),
		DeadLettersTruncated: c.truncated.Load(),
	}
}
