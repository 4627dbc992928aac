package dedupredisstream

import (
	"sync/atomic"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
)

// counters are a Consumer's dedup.ConsumerStats being counted.
type counters struct {
	delivered, acked, retriedInPlace, deadLettered, poisonDropped, settleFailures atomic.Uint64
	reconnects, trimmed                                                           atomic.Uint64
	lag                                                                           atomic.Int64
}

func (c *counters) snapshot() dedup.ConsumerStats {
	return dedup.ConsumerStats{
		Delivered:      c.delivered.Load(),
		Acked:          c.acked.Load(),
		RetriedInPlace: c.retriedInPlace.Load(),
		DeadLettered:   c.deadLettered.Load(),
		PoisonDropped:  c.poisonDropped.Load(),
		SettleFailures: c.settleFailures.Load(),
		Reconnects:     c.reconnects.Load(),
		Trimmed:        c.trimmed.Load(),
		Lag:            c.lag.Load(),
	}
}

// count counts a settlement of decision d that came to err: a dropped
// poison (drop) is counted as such, not as an ack.
func (c *counters) count(d delivery.Decision, drop bool, err error) {
	switch {
	case err != nil:
		c.settleFailures.Add(1)
	case drop:
		c.poisonDropped.Add(1)
	case d.Action == delivery.Ack:
		c.acked.Add(1)
	case d.Action == delivery.Retry:
		c.retriedInPlace.Add(1)
	case d.Action == delivery.DeadLetter:
		c.deadLettered.Add(1)
	}
}
