package dedup

import (
	"sync"
	"time"

	"github.com/dedup-go/dedup/clock"
)

// beatQueue holds the heartbeats of a receiver's deliveries that have not
// beaten yet, in the order they started, under one timer for all of them.
// Most handlers finish within a third of their lease: their heartbeat joins
// the queue and leaves it again, which costs a lock and no timer. The
// timer, armed for the oldest heartbeat's first beat, hands each one that
// is due to a timer of its own, which beats from then on.
//
// The timer is not stopped when the queue empties (a receiver handling one
// message after another would arm it for each); it fires once more, finds
// nothing due and is not armed again. It starts no goroutine until it
// fires. Until then it holds the queue, and only the queue: the queue is
// an allocation of its own, which holds nothing of the receiver's, so
// that a receiver dropped after its last delivery does not keep its store
// (a memstore's records) from the collector for a third of a lease.
type beatQueue struct {
	clock    clock.Clock
	interval time.Duration // a heartbeat's first beat comes this long after its claim
	fire     func()        // q.due, made once

	mu         sync.Mutex
	head, tail *heartbeat
	armed      bool
}

// newBeatQueue returns an empty queue whose heartbeats first beat interval
// after their claims, on clk.
func newBeatQueue(clk clock.Clock, interval time.Duration) *beatQueue {
	q := &beatQueue{clock: clk, interval: interval}
	q.fire = q.due
	return q
}

// add queues h, which holds one claim, for its first beat an interval
// after the claim was sent.
func (q *beatQueue) add(h *heartbeat) {
	q.mu.Lock()
	defer q.mu.Unlock()
	h.queued, h.qprev, h.qnext = true, q.tail, nil
	if q.tail != nil {
		q.tail.qnext = h
	} else {
		q.head = h
	}
	q.tail = h
	if !q.armed {
		q.armed = true
		q.clock.AfterFunc(q.interval, q.fire)
	}
}

// remove takes h out of the queue and reports whether it was still there,
// not yet handed to a timer of its own.
func (q *beatQueue) remove(h *heartbeat) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !h.queued {
		return false
	}
	q.unlink(h)
	return true
}

// unlink takes h, which is queued, out of the queue. Under q.mu.
func (q *beatQueue) unlink(h *heartbeat) {
	if h.qprev != nil {
		h.qprev.qnext = h.qnext
	} else {
		q.head = h.qnext
	}
	if h.qnext != nil {
		h.qnext.qprev = h.qprev
	} else {
		q.tail = h.qprev
	}
	h.queued, h.qprev, h.qnext = false, nil, nil
}

// due runs on the timer: it hands every heartbeat whose first beat is due
// to a timer of its own, and arms the timer again for the next one.
func (q *beatQueue) due() {
	q.mu.Lock()
	q.armed = false
	now := q.clock.Now()
	var due *heartbeat // a chain through qnext, in queue order
	var last *heartbeat
	for h := q.head; h != nil && !h.firstBeat().After(now); h = q.head {
		q.unlink(h)
		if last == nil {
			due = h
		} else {
			last.qnext = h
		}
		last = h
	}
	if q.head != nil {
		q.armed = true
		q.clock.AfterFunc(q.head.firstBeat().Sub(now), q.fire)
	}
	q.mu.Unlock()
	for h := due; h != nil; {
		next := h.qnext
		h.qnext = nil
		h.arm(0)
		h = next
	}
}
