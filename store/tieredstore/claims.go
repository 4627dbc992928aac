package tieredstore

import (
	"sync"
	"time"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/store"
)

// claims notes the claims this process holds on the remote store, with
// what Complete needs to cache the completed record: the remote keeps it,
// but answers Complete with no record. A noted claim is a hint, never a
// decision: forgetting one only costs its record a round trip later.
//
// A remote store that reports what a Complete wrote settles whether a call
// wrote the record; the note then only supplies the record's other fields.
// Otherwise a noted claim is also the evidence that a Complete wrote it:
// the first Complete sent with its token takes it (begin) and, once the
// remote store answered, gives it back (finish); the record may be cached
// only if that call succeeded and no other Complete with the token was
// sent meanwhile. A later Complete finds no note; a concurrent one marks
// the note contended, since the remote store may have applied either.
type claims struct {
	clock    clock.Clock
	capacity int

	mu   sync.Mutex
	held map[string]held
	// nextLeaseEnd is no later than the earliest leaseUntil in held (zero
	// when unknown), as in memcore, so that a full table of live claims
	// costs no walk per Acquire.
	nextLeaseEnd time.Time
}

// held is a claim of this process on the remote store: what its record
// held when Acquire granted it.
type held struct {
	token       store.Token
	attempt     int
	fingerprint string
	lastError   string
	createdAt   time.Time // the remote's, as its Acquire answered it
	leaseUntil  time.Time // on the local clock
	// completing: a Complete with token is in flight (begin took the
	// note); contended: another Complete with token was sent meanwhile.
	completing, contended bool
}

// completedRecord is the record req writes in the remote store when it
// completes the claim h notes (its expiry left for remember to set). Its
// CompletedAt is left zero: the remote store stamps it, by a clock this
// Store does not read, and answers Complete with no record.
func (h held) completedRecord(req store.CompleteRequest) store.Record {
	return store.Record{
		Key:         req.Key,
		State:       store.StateCompleted,
		Attempt:     h.attempt,
		Fingerprint: h.fingerprint,
		Result:      req.Result,
		LastError:   h.lastError,
		Token:       req.Token,
		CreatedAt:   h.createdAt,
	}
}

// hold notes a claim. When capacity claims are noted, those whose lease
// ended are forgotten first; if none has, the claim is not noted and its
// record is simply not cached on completion.
func (c *claims) hold(key string, h held) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.held[key]; !ok && len(c.held) >= c.capacity && !c.sweep() {
		return
	}
	c.held[key] = h
	c.noteLease(h.leaseUntil)
}

// noteLease keeps nextLeaseEnd no later than t. Under c.mu.
func (c *claims) noteLease(t time.Time) {
	if c.nextLeaseEnd.IsZero() || t.Before(c.nextLeaseEnd) {
		c.nextLeaseEnd = t
	}
}

// sweep forgets the noted claims whose lease ended and reports whether
// room was made. It walks them only once some lease has ended since the
// last walk. Under c.mu.
func (c *claims) sweep() bool {
	now := c.clock.Now()
	if !c.nextLeaseEnd.IsZero() && now.Before(c.nextLeaseEnd) {
		return false
	}
	var next time.Time
	for k, h := range c.held {
		switch {
		case !now.Before(h.leaseUntil):
			delete(c.held, k)
		case next.IsZero() || h.leaseUntil.Before(next):
			next = h.leaseUntil
		}
	}
	c.nextLeaseEnd = next
	return len(c.held) < c.capacity
}

// unhold forgets the claim of token on key and returns it.
func (c *claims) unhold(key string, token store.Token) (held, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.held[key]
	if !ok || h.token != token {
		return held{}, false
	}
	delete(c.held, key)
	return h, true
}

// begin notes that a Complete with token on key is about to be sent, and
// reports whether it is the first: the claim is noted and no other
// Complete with token was sent through this Store. Only the first may
// cache the record, and only if no other is sent before it returns.
func (c *claims) begin(key string, token store.Token) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.held[key]
	if !ok || h.token != token {
		return false
	}
	if h.completing {
		h.contended = true
	} else {
		h.completing = true
	}
	c.held[key] = h
	return !h.contended
}

// finish forgets the claim of token on key once the first Complete with
// it (begin reported true) was answered, and returns it with ok true when
// that call is the only Complete with token sent through this Store while
// it was in flight: had the remote store accepted it, it wrote the record.
func (c *claims) finish(key string, token store.Token) (held, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.held[key]
	if !ok || h.token != token || !h.completing {
		return held{}, false // forgotten meanwhile (Release, Delete, a takeover noted, the sweep)
	}
	delete(c.held, key)
	return h, !h.contended
}

// forget forgets the claim on key, whatever its token: the record was
// deleted, so no token completes it.
func (c *claims) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.held, key)
}

// extend moves the deadline of the claim of token on key to leaseUntil.
func (c *claims) extend(key string, token store.Token, leaseUntil time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.held[key]
	if !ok || h.token != token {
		return
	}
	h.leaseUntil = leaseUntil
	c.held[key] = h
	c.noteLease(leaseUntil)
}
