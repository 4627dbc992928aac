package dedup

import "time"

// Lease returns how long a claim holds its key before another delivery may
// take it over (Config.Lease). The heartbeat extends a running handler's
// lease every third of it, so adapters compare a third of it with the
// broker's acknowledgement deadline (JetStream's AckWait), and use it to
// bound how long a delivery waits for another process that holds its key.
func (r *Receiver[M, R]) Lease() time.Duration { return r.cfg.Lease }
