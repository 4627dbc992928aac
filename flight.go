package dedup

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/dedup-go/dedup/store"
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
	// waits, so that a key nobody else delivers costs no channel.
	done      chan struct{}
	published bool
	res       Result[R]
	err       error
}

// delivery is what handling a new message allocates, in one piece: its
// flight, the claim its handler holds, the handler's context, and the
// heartbeat that extends the claim.
type delivery[R any] struct {
	call flightCall[R]
	held store.HeldClaim
	hctx handlerContext
	hb   heartbeat
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
		return first, false
	}
	if g.calls == nil {
		g.calls = make(map[string]*flightCall[R])
	}
	g.calls[key] = c
	return c, true
}

// end ends the leader's call with its outcome, unless one was published
// already: later deliveries of the key start their own.
func (g *flightGroup[R]) end(key string, c *flightCall[R], res Result[R], err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.calls, key)
	g.publishLocked(c, res, err)
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
