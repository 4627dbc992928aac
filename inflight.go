package dedup

import (
	"sync"
	"sync/atomic"
	"time"
)

// The first look at a key held elsewhere comes after about this long; each
// further look in a row waits twice as long, up to the holder's remaining
// lease (or this long, when less remains).
const firstInFlightWait = 200 * time.Millisecond

// maxInFlightWaits bounds the keys remembered at once. Past it, a key is
// looked at again after the first wait each time: more store reads, never
// a longer stall.
const maxInFlightWaits = 1 << 14

// inFlightWaits remembers, for each key that this receiver found held by
// another delivery, how many times in a row it did, so that the next look
// comes soon when the holder has just begun (a consumer-group rebalance
// hands a partition over while its old owner finishes in milliseconds) and
// ever later while it goes on. A holder that finishes is seen within a
// fraction of a second; one that died still costs its lease, which nothing
// can shorten. The looks at one key while a lease runs out are at most
// log2(lease / 200 ms) + 3: 10 for the default 30 s.
type inFlightWaits struct {
	n  atomic.Int64 // len(m), read without the lock on the claim path
	mu sync.Mutex
	m  map[string]inFlightWait
}

type inFlightWait struct {
	looks   int       // in-flight answers in a row
	until   time.Time // after this the holder's lease has ended: start over
	attempt int       // the holder's claim: another one has just begun, start over
}

// next returns how long to wait before looking at key again, now that it
// was found held by claim attempt with remaining lease left. A new holder
// (a takeover of an orphaned claim) starts the waits over: it has just
// begun, and may finish in milliseconds.
func (w *inFlightWaits) next(key string, now time.Time, remaining time.Duration, attempt int) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.m[key]
	if !ok || now.After(e.until) || e.attempt != attempt {
		e = inFlightWait{attempt: attempt}
	}
	// Past the lease's end on this clock (the holder's store may disagree by
	// a clock skew), the wait stays one first wait rather than none.
	limit := max(remaining, firstInFlightWait)
	d := limit // the step would reach the lease's end: look right then, unjittered
	if e.looks < 30 && firstInFlightWait<<e.looks < limit {
		d = ExponentialBackoff{Base: firstInFlightWait, Max: limit}.Delay(e.looks + 1)
	}
	e.looks++
	e.until = now.Add(remaining + d)
	if !ok {
		if len(w.m) >= maxInFlightWaits {
			w.expire(now)
		}
		if len(w.m) >= maxInFlightWaits {
			return d
		}
		if w.m == nil {
			w.m = make(map[string]inFlightWait)
		}
	}
	w.m[key] = e
	w.n.Store(int64(len(w.m)))
	return d
}

// forget drops key once it was claimed or found completed. It takes no
// lock while nothing is remembered, which is the usual case.
func (w *inFlightWaits) forget(key string) {
	if w.n.Load() == 0 {
		return
	}
	w.mu.Lock()
	delete(w.m, key)
	w.n.Store(int64(len(w.m)))
	w.mu.Unlock()
}

// expire drops the keys whose holder's lease has ended. w.mu is held.
func (w *inFlightWaits) expire(now time.Time) {
	for k, e := range w.m {
		if now.After(e.until) {
			delete(w.m, k)
		}
	}
}
