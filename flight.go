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
// once done is closed.
type flightCall[R any] struct {
	fingerprint string       // set by the leader before anyone reads it
	waiters     atomic.Int32 // deliveries waiting for the outcome
	done        chan struct{}
	once        sync.Once
	res         Result[R]
	err         error
}

// publish hands the outcome to the deliveries waiting for it, once: a
// leader whose handler succeeded publishes before retrying a failed
// completion, so that in-process duplicates are answered meanwhile.
func (c *flightCall[R]) publish(res Result[R], err error) {
	c.once.Do(func() {
		c.res, c.err = res, err
		close(c.done)
	})
}

// join returns the key's call, and whether the caller leads it: a leader
// must call leave when done.
func (g *flightGroup[R]) join(key string) (*flightCall[R], bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.calls[key]; ok {
		return c, false
	}
	if g.calls == nil {
		g.calls = make(map[string]*flightCall[R])
	}
	c := &flightCall[R]{done: make(chan struct{})}
	g.calls[key] = c
	return c, true
}

// leave ends the leader's call, which must have published its outcome:
// later deliveries of the key start their own.
func (g *flightGroup[R]) leave(key string, c *flightCall[R]) {
	g.mu.Lock()
	delete(g.calls, key)
	g.mu.Unlock()
	c.publish(Result[R]{Key: key}, errFlightAbandoned) // only if the leader panicked
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
