package dedup

import (
	"errors"
	"sync"
	"sync/atomic"
)

// errFlightAbandoned is what waiting deliveries get if the first one ended
// without an outcome (a panic that escaped): they are retried.
var errFlightAbandoned = errors.New("dedup: the first delivery of the key ended without an outcome")

// flightGroup tracks the keys being handled in this process, so that
// concurrent deliveries of one key wait for the first instead of spending a
// store round trip each (or, with NoWait, answer in flight at once).
type flightGroup[R any] struct {
	mu    sync.Mutex
	calls map[string]*flightCall[R]
}

// flightCall is one key's first delivery, and what it hands the others
// once its outcome is published.
type flightCall[R any] struct {
	fingerprint string       // set by the leader before anyone reads it
	waiters     atomic.Int32 // deliveries waiting for the outcome

	// Guarded by the group's mu. done is made by the first delivery that
	// waits, so that a key nobody else delivers costs no channel. joined
	// counts the deliveries that found the call in the group: while none
	// did, the leader's is the only pointer to it.
	done      chan struct{}
	published bool
	joined    int
	res       Result[R]
	err       error
}

// delivery is what handling a new message needs besides its handler's
// context: its flight and the heartbeat that extends its claim. Neither
// reaches user code, so a delivery is recycled through the receiver's
// pool once nothing else can reach it (see Receiver.recycle): the one
// allocation left to a new message is its handler's context.
type delivery[R any] struct {
	call flightCall[R]
	hb   heartbeat
}

// deliveryPool recycles the deliveries of a receiver.
type deliveryPool[R any] struct{ pool sync.Pool }

// get returns a zero delivery.
func (p *deliveryPool[R]) get() *delivery[R] {
	if d, ok := p.pool.Get().(*delivery[R]); ok {
		return d
	}
	return new(delivery[R])
}

// put zeroes d, which nothing but its caller can reach any more, and keeps
// it for another delivery.
func (p *deliveryPool[R]) put(d *delivery[R]) {
	*d = delivery[R]{}
	p.pool.Put(d)
}

// publish hands c's outcome to the deliveries waiting for it, once: a
// leader whose handler succeeded publishes before retrying a failed
// completion, so that in-process duplicates are answered meanwhile.
func (g *flightGroup[R]) publish(c *flightCall[R], res Result[R], err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.publishLocked(c, res, err)
}

// publishLocked is publish under g.mu.
func (g *flightGroup[R]) publishLocked(c *flightCall[R], res Result[R], err error) {
	if c.published {
		return
	}
	c.res, c.err, c.published = res, err, true
	if c.done != nil {
		close(c.done)
	}
}

// wait returns a channel that is closed once c's outcome is published;
// the outcome may then be read from c.
func (g *flightGroup[R]) wait(c *flightCall[R]) <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.published {
			close(c.done)
		}
	}
	return c.done
}

// join makes c the key's call unless the key has one already, and returns
// the key's call and whether the caller leads it: a leader must call end
// when done.
func (g *flightGroup[R]) join(key string, c *flightCall[R]) (*flightCall[R], bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if first, ok := g.calls[key]; ok {
		first.joined++
		return first, false
	}
	if g.calls == nil {
		g.calls = make(map[string]*flightCall[R])
	}
	g.calls[key] = c
	return c, true
}

// end ends the leader's call with its outcome, unless one was published
// already: later deliveries of the key start their own. It reports whether
// no other delivery joined the call, which nobody can find any more: the
// leader then holds the only pointer to it.
func (g *flightGroup[R]) end(key string, c *flightCall[R], res Result[R], err error) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.calls, key)
	g.publishLocked(c, res, err)
	return c.joined == 0
}

// waiting returns how many deliveries wait on key's call.
func (g *flightGroup[R]) waiting(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.calls[key]; ok {
		return int(c.waiters.Load())
	}
	return 0
}
