package dedup

import (
	"errors"
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// errFlightAbandoned is what waiting deliveries get if the first one ended
// without an outcome (a panic that escaped): they are retried.
var errFlightAbandoned = errors.New("dedup: the first delivery of the key ended without an outcome")

// flightBuckets is how many lists the keys in flight are spread over, each
// under a lock of its own.
const flightBuckets = 256

// flightGroup tracks the keys being handled in this process, so that
// concurrent deliveries of one key wait for the first instead of spending a
// store round trip each (or, with NoWait, answer in flight at once).
//
// It is a hash table of its own rather than a map under one lock: a key
// is hashed once, its call is linked into a short list and out of it again
// without an allocation, and deliveries of different keys seldom share a
// lock.
type flightGroup[R any] struct {
	seed    maphash.Seed
	buckets [flightBuckets]flightBucket[R]
}

// flightBucket holds the calls of the keys that hash to it.
type flightBucket[R any] struct {
	mu    sync.Mutex
	calls *flightCall[R] // linked through next
}

// flightCall is one key's first delivery, and what it hands the others
// once its outcome is published.
type flightCall[R any] struct {
	fingerprint string       // set by the leader before anyone reads it
	waiters     atomic.Int32 // deliveries waiting for the outcome
	key         string
	bucket      *flightBucket[R] // nil while the call is in no group

	// Guarded by the bucket's mu. done is made by the first delivery that
	// waits, so that a key nobody else delivers costs no channel. joined
	// counts the deliveries that found the call in the group: while none
	// did, the leader's is the only pointer to it.
	next      *flightCall[R]
	done      chan struct{}
	published bool
	joined    int
	res       Result[R]
	err       error
}

// init readies an empty group.
func (g *flightGroup[R]) init() { g.seed = maphash.MakeSeed() }

func (g *flightGroup[R]) bucketOf(key string) *flightBucket[R] {
	return &g.buckets[maphash.String(g.seed, key)%flightBuckets]
}

// runState is what handling a new message needs besides its handler's
// context: its flight and the heartbeat that extends its claim. Neither
// reaches user code, so a delivery is recycled through the receiver's
// pool once nothing else can reach it (see Receiver.recycle): the one
// allocation left to a new message is its handler's context.
type runState[R any] struct {
	call flightCall[R]
	hb   heartbeat
}

// deliveryPool recycles the deliveries of a receiver.
type deliveryPool[R any] struct{ pool sync.Pool }

// get returns a zero delivery.
func (p *deliveryPool[R]) get() *runState[R] {
	if d, ok := p.pool.Get().(*runState[R]); ok {
		return d
	}
	return new(runState[R])
}

// put zeroes d, which nothing but its caller can reach any more, and keeps
// it for another delivery.
func (p *deliveryPool[R]) put(d *runState[R]) {
	*d = runState[R]{}
	p.pool.Put(d)
}

// publish hands c's outcome to the deliveries waiting for it, once: a
// leader whose handler succeeded publishes before retrying a failed
// completion, so that in-process duplicates are answered meanwhile. A call
// in no group (NoWait) has nobody to hand it to.
func (g *flightGroup[R]) publish(c *flightCall[R], res Result[R], err error) {
	b := c.bucket
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c.publishLocked(res, err)
}

// publishLocked is publish under c's bucket's mu.
func (c *flightCall[R]) publishLocked(res Result[R], err error) {
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
	b := c.bucket
	b.mu.Lock()
	defer b.mu.Unlock()
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
	b := g.bucketOf(key)
	b.mu.Lock()
	defer b.mu.Unlock()
	for first := b.calls; first != nil; first = first.next {
		if first.key == key {
			first.joined++
			return first, false
		}
	}
	c.key, c.bucket, c.next = key, b, b.calls
	b.calls = c
	return c, true
}

// end ends the leader's call with its outcome, unless one was published
// already: later deliveries of the key start their own. It reports whether
// no other delivery joined the call, which nobody can find any more: the
// leader then holds the only pointer to it.
func (g *flightGroup[R]) end(c *flightCall[R], res Result[R], err error) bool {
	b := c.bucket
	b.mu.Lock()
	defer b.mu.Unlock()
	for p := &b.calls; *p != nil; p = &(*p).next {
		if *p == c {
			*p = c.next
			break
		}
	}
	c.next = nil
	c.publishLocked(res, err)
	return c.joined == 0
}

// waiting returns how many deliveries wait on key's call.
func (g *flightGroup[R]) waiting(key string) int {
	b := g.bucketOf(key)
	b.mu.Lock()
	defer b.mu.Unlock()
	for c := b.calls; c != nil; c = c.next {
		if c.key == key {
			return int(c.waiters.Load())
		}
	}
	return 0
}
