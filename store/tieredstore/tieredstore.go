package tieredstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/store/memstore"
)

// Defaults of Options.
const (
	DefaultMaxLocalTTL = 5 * time.Minute
	DefaultClockSkew   = time.Second
)

// Options configures a Store. A nil *Options means all defaults; a zero
// field takes its default.
type Options struct {
	// Capacity bounds the completed records kept locally, least recently
	// used first out. Must not be negative. Defaults to
	// memstore.DefaultCapacity.
	Capacity int

	// MaxLocalTTL bounds how long a record is answered locally, whatever
	// its retention. It is how long another process may still answer a
	// duplicate from memory after an operator deleted the record from the
	// remote store (to let a message run again). Must not be negative.
	// Defaults to 5m.
	MaxLocalTTL time.Duration

	// ClockSkew is how far this process's clock may be ahead of the remote
	// store's. A completed record that another process stored carries its
	// expiry on the remote's clock; its local copy expires ClockSkew
	// earlier, so it never outlives the remote record. (A record this
	// process completed needs no margin: its local expiry is measured from
	// before the remote call.) Must not be negative. Defaults to 1s.
	ClockSkew time.Duration

	// Clock is the local tier's time source. Defaults to clock.Real().
	Clock clock.Clock
}

// Store is a dedup.Store that keeps completed records in process memory in
// front of a remote store. It is safe for concurrent use.
type Store struct {
	remote      dedup.Store
	local       *memstore.Store
	clock       clock.Clock
	maxLocalTTL time.Duration
	clockSkew   time.Duration
	capacity    int

	mu sync.Mutex
	// claims remembers what Complete needs to cache a record (its attempt
	// and fingerprint) for the claims this process holds, bounded by
	// capacity.
	claims map[string]held
	// nextLeaseEnd is no later than the earliest leaseUntil in claims (zero
	// when unknown), as in memstore.
	nextLeaseEnd time.Time

	localHits atomic.Uint64
	cached    atomic.Uint64
}

// held is a claim of this process on the remote store.
type held struct {
	token       dedup.Token
	attempt     int
	fingerprint string
	leaseUntil  time.Time // on the local clock
}

var (
	_ dedup.Store      = (*Store)(nil)
	_ dedup.Peeker     = (*Store)(nil)
	_ dedup.BatchStore = (*Store)(nil)
	_ dedup.Inspector  = (*Store)(nil)
)

// New returns a Store caching the completed records of remote. A nil opts
// means all defaults.
func New(remote dedup.Store, opts *Options) (*Store, error) {
	if remote == nil {
		return nil, fmt.Errorf("tieredstore: %w: the remote store is nil", dedup.ErrInvalidConfig)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"MaxLocalTTL", o.MaxLocalTTL}, {"ClockSkew", o.ClockSkew}} {
		if f.d < 0 {
			return nil, fmt.Errorf("tieredstore: %w: %s is %v, it must not be negative", dedup.ErrInvalidConfig, f.name, f.d)
		}
	}
	if o.Clock == nil {
		o.Clock = clock.Real()
	}
	local, err := memstore.New(&memstore.Options{Capacity: o.Capacity, Clock: o.Clock})
	if err != nil {
		return nil, fmt.Errorf("tieredstore: %w", err)
	}
	return &Store{
		remote:      remote,
		local:       local,
		clock:       o.Clock,
		maxLocalTTL: cmp.Or(o.MaxLocalTTL, DefaultMaxLocalTTL),
		clockSkew:   cmp.Or(o.ClockSkew, DefaultClockSkew),
		capacity:    cmp.Or(o.Capacity, memstore.DefaultCapacity),
		claims:      make(map[string]held),
	}, nil
}

// Remote returns the remote store.
func (s *Store) Remote() dedup.Store { return s.remote }

// Peek answers a completed record from the local tier, without I/O.
func (s *Store) Peek(prefix, id string) *dedup.Record {
	rec := s.local.Peek(prefix, id)
	if rec != nil {
		s.localHits.Add(1)
	}
	return rec
}

// Acquire answers a key completed in the local tier at once; anything else
// goes to the remote store. A completed record the remote store reports is
// cached.
func (s *Store) Acquire(ctx context.Context, key string, req dedup.AcquireRequest) (dedup.Claim, error) {
	if c, err, ok := s.acquireLocal(key, req); ok {
		return c, err
	}
	start := s.clock.Now()
	c, err := s.remote.Acquire(ctx, key, req)
	if err == nil {
		s.learn(key, c, start, req.Lease)
	}
	return c, err
}

// acquireLocal answers Acquire from the local tier when it holds key; ok
// is false when the remote store must answer.
func (s *Store) acquireLocal(key string, req dedup.AcquireRequest) (c dedup.Claim, err error, ok bool) {
	if key == "" || req.Lease <= 0 {
		return dedup.Claim{}, nil, false // the remote store reports the bad input
	}
	rec := s.Peek(dedup.SplitKey(key))
	if rec == nil {
		return dedup.Claim{}, nil, false
	}
	if rec.Fingerprint != "" && req.Fingerprint != "" && rec.Fingerprint != req.Fingerprint {
		return dedup.Claim{}, fmt.Errorf("tieredstore: acquire %q: %w: the completed record has another fingerprint", key, dedup.ErrKeyReused), true
	}
	return dedup.Claim{Record: *rec}, nil, true
}

// learn acts on the remote store's answer to Acquire: it caches a completed
// record, or notes a claim so that Complete can cache its record.
func (s *Store) learn(key string, c dedup.Claim, start time.Time, lease time.Duration) {
	switch {
	case c.Acquired:
		s.hold(key, held{token: c.Token, attempt: c.Record.Attempt, fingerprint: c.Record.Fingerprint, leaseUntil: start.Add(lease)})
	case c.Record.State == dedup.StateCompleted:
		// The expiry is on the remote's clock: keep a margin for skew.
		s.remember(c.Record, start, c.Record.ExpiresAt.Add(-s.clockSkew))
	}
}

// remember caches a completed record until expires, or MaxLocalTTL after
// start if sooner.
func (s *Store) remember(rec dedup.Record, start, expires time.Time) {
	if limit := start.Add(s.maxLocalTTL); limit.Before(expires) {
		expires = limit
	}
	if !s.clock.Now().Before(expires) {
		return
	}
	rec.ExpiresAt = expires
	if ok, err := s.local.Remember(rec); ok && err == nil {
		s.cached.Add(1)
	}
}

// hold notes a claim of this process. When capacity claims are noted, those
// whose lease ended are forgotten first; if none has, the claim is not
// noted and its record is simply not cached on completion.
func (s *Store) hold(key string, h held) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.claims) >= s.capacity && !s.sweep() {
		return
	}
	s.claims[key] = h
	if s.nextLeaseEnd.IsZero() || h.leaseUntil.Before(s.nextLeaseEnd) {
		s.nextLeaseEnd = h.leaseUntil
	}
}

// sweep forgets the noted claims whose lease ended and reports whether
// room was made. It walks them only once some lease has ended since the
// last walk, so a table full of live claims costs nothing. Under s.mu.
func (s *Store) sweep() bool {
	now := s.clock.Now()
	if !s.nextLeaseEnd.IsZero() && now.Before(s.nextLeaseEnd) {
		return false
	}
	var next time.Time
	for k, h := range s.claims {
		switch {
		case !now.Before(h.leaseUntil):
			delete(s.claims, k)
		case next.IsZero() || h.leaseUntil.Before(next):
			next = h.leaseUntil
		}
	}
	s.nextLeaseEnd = next
	return len(s.claims) < s.capacity
}

// unhold forgets the claim of token on key and returns it.
func (s *Store) unhold(key string, token dedup.Token) (held, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.claims[key]
	if !ok || h.token != token {
		return held{}, false
	}
	delete(s.claims, key)
	return h, true
}

// Complete completes the record in the remote store, then caches it
// locally until its retention ends as measured from before the call, so
// the copy never outlives the remote record.
func (s *Store) Complete(ctx context.Context, key string, token dedup.Token, result []byte, retention time.Duration) error {
	start := s.clock.Now()
	err := s.remote.Complete(ctx, key, token, result, retention)
	s.completed(key, token, result, start, retention, err)
	return err
}

// completed caches a record the remote store confirmed, and forgets the
// claim unless the call failed in a way that leaves it held.
func (s *Store) completed(key string, token dedup.Token, result []byte, start time.Time, retention time.Duration, err error) {
	if err != nil && !errors.Is(err, dedup.ErrLeaseLost) {
		return // the claim may still hold: a retried Complete can cache
	}
	h, ok := s.unhold(key, token)
	if !ok || err != nil {
		return
	}
	s.remember(dedup.Record{
		Key:         key,
		State:       dedup.StateCompleted,
		Attempt:     h.attempt,
		Fingerprint: h.fingerprint,
		Result:      result,
	}, start, start.Add(retention))
}

// Release goes to the remote store: failed records are never cached.
func (s *Store) Release(ctx context.Context, key string, token dedup.Token, failure dedup.Failure) error {
	err := s.remote.Release(ctx, key, token, failure)
	if err == nil || errors.Is(err, dedup.ErrLeaseLost) {
		s.unhold(key, token)
	}
	return err
}

// Extend goes to the remote store.
func (s *Store) Extend(ctx context.Context, key string, token dedup.Token, lease time.Duration) error {
	start := s.clock.Now()
	err := s.remote.Extend(ctx, key, token, lease)
	switch {
	case errors.Is(err, dedup.ErrLeaseLost):
		s.unhold(key, token)
	case err == nil:
		s.mu.Lock()
		if h, ok := s.claims[key]; ok && h.token == token {
			h.leaseUntil = start.Add(lease)
			s.claims[key] = h
		}
		s.mu.Unlock()
	}
	return err
}

// Stats counts the local tier's work.
type Stats struct {
	// LocalHits counts duplicates answered from memory, with no call to
	// the remote store.
	LocalHits uint64
	// Cached counts completed records copied into the local tier.
	Cached uint64
	// Evictions counts local copies evicted for room before they expired;
	// unlike memstore's, such an eviction costs a round trip, never a
	// duplicate.
	Evictions uint64
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	return Stats{LocalHits: s.localHits.Load(), Cached: s.cached.Load(), Evictions: s.local.Stats().Evictions}
}
