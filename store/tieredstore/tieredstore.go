package tieredstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/internal/memcore"
)

// Defaults of Options.
const (
	DefaultCapacity    = memcore.DefaultCapacity
	DefaultMaxLocalTTL = 5 * time.Minute
	DefaultClockSkew   = time.Second
)

// Options configures a Store. A nil *Options means all defaults; a zero
// field takes its default.
type Options struct {
	// Capacity bounds the completed records kept locally, least recently
	// used first out, and separately the claims of this process noted so
	// that their records can be cached on completion. Must not be negative.
	// Defaults to DefaultCapacity (100_000).
	Capacity int

	// MaxLocalTTL bounds how long a record is answered locally, whatever
	// its retention. It is how long another process may still answer a
	// duplicate from memory after an operator deleted the record from the
	// remote store (to let a message run again). Must not be negative.
	// Defaults to 5m.
	MaxLocalTTL time.Duration

	// ClockSkew is how far this process's clock may be behind the remote
	// store's. A completed record that another process stored carries its
	// expiry on the remote's clock; its local copy expires ClockSkew
	// earlier on the local clock, so it never outlives the remote record
	// (a local clock that is behind would otherwise reach that expiry
	// after the remote store dropped the record). (A record this
	// process completed needs no margin: its local expiry is measured from
	// before the remote call.) Must not be negative. Defaults to 1s.
	ClockSkew time.Duration

	// Clock is the local tier's time source. Defaults to clock.Real().
	Clock clock.Clock
}

// Store is a store.Store that keeps completed records in process memory in
// front of a remote store. It is safe for concurrent use.
type Store struct {
	remote store.Store
	// reporter is remote when it reports what a Complete wrote, else nil.
	reporter store.CompleteReporter
	// steps is remote when it keeps step records (store.KeepsSteps), else
	// nil.
	steps       store.StepStore
	local       *memcore.Store
	clock       clock.Clock
	maxLocalTTL time.Duration
	clockSkew   time.Duration

	claims claims

	localHits atomic.Uint64
	cached    atomic.Uint64
}

var (
	_ store.Store      = (*Store)(nil)
	_ store.Peeker     = (*Store)(nil)
	_ store.BatchStore = (*Store)(nil)
	_ store.Inspector  = (*Store)(nil)
	_ store.Bounded    = (*Store)(nil)
	_ store.StepStore  = (*Store)(nil)

	_ store.CompleteReporter = (*Store)(nil)
	_ store.StepsKept        = (*Store)(nil)
)

// New returns a Store caching the completed records of remote. A nil opts
// means all defaults.
func New(remote store.Store, opts *Options) (*Store, error) {
	if remote == nil {
		return nil, fmt.Errorf("tieredstore: %w: the remote store is nil", store.ErrInvalidConfig)
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
			return nil, fmt.Errorf("tieredstore: %w: %s is %v, it must not be negative", store.ErrInvalidConfig, f.name, f.d)
		}
	}
	if o.Capacity < 0 {
		return nil, fmt.Errorf("tieredstore: %w: Capacity is %d, it must not be negative", store.ErrInvalidConfig, o.Capacity)
	}
	o.Capacity = cmp.Or(o.Capacity, DefaultCapacity)
	if o.Clock == nil {
		o.Clock = clock.Real()
	}
	local, err := memcore.New(&memcore.Options{Capacity: o.Capacity, Clock: o.Clock})
	if err != nil {
		return nil, fmt.Errorf("tieredstore: %w", err)
	}
	reporter, _ := remote.(store.CompleteReporter)
	var steps store.StepStore
	if store.KeepsSteps(remote) {
		steps = remote.(store.StepStore)
	}
	return &Store{
		remote:      remote,
		reporter:    reporter,
		steps:       steps,
		local:       local,
		clock:       o.Clock,
		maxLocalTTL: cmp.Or(o.MaxLocalTTL, DefaultMaxLocalTTL),
		clockSkew:   cmp.Or(o.ClockSkew, DefaultClockSkew),
		claims:      claims{clock: o.Clock, capacity: o.Capacity, held: make(map[string]held)},
	}, nil
}

// CallTimeout is the remote store's, when it bounds its calls
// (store.Bounded), and 0 otherwise: the local tier never waits.
func (s *Store) CallTimeout() time.Duration {
	if b, ok := s.remote.(store.Bounded); ok {
		return b.CallTimeout()
	}
	return 0
}

// Remote returns the remote store.
func (s *Store) Remote() store.Store { return s.remote }

// Peek answers a completed record from the local tier, without I/O.
func (s *Store) Peek(prefix, id string) *store.Record {
	rec := s.local.Peek(prefix, id)
	if rec != nil {
		s.localHits.Add(1)
	}
	return rec
}

// Acquire answers a key completed in the local tier at once; anything else
// goes to the remote store. A completed record the remote store reports is
// cached, and a claim it grants is noted so that Complete can cache its
// record.
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.Claim, error) {
	if err := ctx.Err(); err != nil {
		return store.Claim{}, fmt.Errorf("tieredstore: acquire %q: %w", req.Key, err)
	}
	if c, err, ok := s.acquireLocal(req); ok {
		return c, err
	}
	start := s.clock.Now()
	c, err := s.remote.Acquire(ctx, req)
	if err == nil {
		s.learn(req, c, start)
	}
	return c, err
}

// acquireLocal answers Acquire from the local tier when it holds the key;
// ok is false when the remote store must answer.
func (s *Store) acquireLocal(req store.AcquireRequest) (c store.Claim, err error, ok bool) {
	if req.Key == "" || req.Lease <= 0 {
		return store.Claim{}, nil, false // the remote store reports the bad input
	}
	rec := s.Peek(store.SplitKey(req.Key))
	if rec == nil {
		return store.Claim{}, nil, false
	}
	if rec.Fingerprint != "" && req.Fingerprint != "" && rec.Fingerprint != req.Fingerprint {
		return store.Claim{}, fmt.Errorf("tieredstore: acquire %q: %w: the completed record has another fingerprint", req.Key, store.ErrKeyReused), true
	}
	return store.Claim{Record: *rec}, nil, true
}

// learn acts on the remote store's answer to Acquire: it caches a completed
// record, or notes a claim so that Complete can cache its record.
func (s *Store) learn(req store.AcquireRequest, c store.Claim, start time.Time) {
	switch {
	case c.Acquired:
		// A completed record keeps what its claim's record holds: the
		// attempt count, the fingerprint kept, the last failure and the
		// creation time.
		s.claims.hold(req.Key, held{
			token:       c.Token,
			attempt:     c.Record.Attempt,
			fingerprint: c.Record.Fingerprint,
			lastError:   c.Record.LastError,
			createdAt:   c.Record.CreatedAt,
			leaseUntil:  start.Add(req.Lease),
		})
	case c.Record.State == store.StateCompleted:
		// The expiry is on the remote's clock: keep a margin for skew.
		s.remember(c.Record, start, c.Record.ExpiresAt.Add(-s.clockSkew))
	}
}

// remember caches a completed record until expires, or MaxLocalTTL after
// start if sooner.
func (s *Store) remember(rec store.Record, start, expires time.Time) {
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

// Complete completes the record in the remote store, then caches it
// locally when this call is known to be the one that wrote it: see the
// package documentation. The copy expires at its retention as measured
// from before the call, so it never outlives the remote record.
//
// Whether the token holds the key, and whether the record it already
// completed may be completed again, is the remote store's answer alone:
// the local tier never answers Complete, Release or Extend.
func (s *Store) Complete(ctx context.Context, req store.CompleteRequest) error {
	_, err := s.CompleteReport(ctx, req)
	return err
}

// CompleteReport is Complete, reporting the remote store's answer: what
// the call did to the record when the remote store is a
// store.CompleteReporter, store.CompletionUnknown otherwise.
func (s *Store) CompleteReport(ctx context.Context, req store.CompleteRequest) (store.Completion, error) {
	first := s.claims.begin(req.Key, req.Token)
	start := s.clock.Now()
	var (
		c   store.Completion
		err error
	)
	if s.reporter != nil {
		c, err = s.reporter.CompleteReport(ctx, req)
	} else {
		err = s.remote.Complete(ctx, req)
	}
	s.completed(ctx, req, start, c, err, first)
	return c, err
}

// completed caches the record of a Complete the remote store accepted, if
// that call wrote it. A Complete with a token that already completed the
// record succeeds and changes nothing, so the remote store keeps the first
// result and expiry: a call that did not write the record (a retry after a
// failure whose answer was lost, a concurrent one, one through another
// Store) must cache nothing, and the next duplicate learns the remote's
// record.
//
// A remote store that reports it says which call wrote (c). Otherwise
// this Store must know: the call was first (begin reported it the first
// Complete with its token through this Store), the only one sent while it
// was in flight, and not preceded by the handler's own completion in its
// transaction.
func (s *Store) completed(ctx context.Context, req store.CompleteRequest, start time.Time, c store.Completion, err error, first bool) {
	switch {
	case c == store.CompletionWrote:
		// The remote store holds req.Result, expiring req.Retention after a
		// moment no earlier than start.
		if h, ok := s.claims.unhold(req.Key, req.Token); ok {
			s.remember(h.completedRecord(req), start, start.Add(req.Retention))
		}
		return
	case c == store.CompletionUnchanged, errors.Is(err, store.ErrLeaseLost):
		s.claims.unhold(req.Key, req.Token)
		return
	case err != nil && s.reporter != nil:
		// The remote store may or may not have written this call's result;
		// a retry that reports it wrote finds the note and caches. The note
		// stays marked completing, so no answer that cannot tell does.
		return
	case !first:
		return
	}
	// The remote store cannot tell: whatever the answer, the note goes.
	// After an error the remote store may have written this call's result,
	// so a retry cannot tell whether it wrote the record.
	h, ok := s.claims.finish(req.Key, req.Token)
	if !ok || err != nil {
		return
	}
	if hc, ok := store.ClaimFromContext(ctx); ok && hc.Key == req.Key && hc.Token == req.Token && hc.Completed() {
		// The handler completed the record in its own transaction, so the
		// remote store keeps that first result, which need not be
		// req.Result: the next Acquire learns the record from the remote.
		return
	}
	s.remember(h.completedRecord(req), start, start.Add(req.Retention))
}

// Release goes to the remote store: failed records are never cached.
func (s *Store) Release(ctx context.Context, req store.ReleaseRequest) error {
	err := s.remote.Release(ctx, req)
	if err == nil || errors.Is(err, store.ErrLeaseLost) {
		s.claims.unhold(req.Key, req.Token)
	}
	return err
}

// Extend goes to the remote store; the noted claim follows its answer.
func (s *Store) Extend(ctx context.Context, req store.ExtendRequest) error {
	start := s.clock.Now()
	err := s.remote.Extend(ctx, req)
	s.extended(req, start, err)
	return err
}

// extended updates the noted claim after the remote store answered Extend:
// a lost lease forgets it, an extended one moves its deadline (earlier too,
// as the remote's did).
func (s *Store) extended(req store.ExtendRequest, start time.Time, err error) {
	switch {
	case errors.Is(err, store.ErrLeaseLost):
		s.claims.unhold(req.Key, req.Token)
	case err == nil:
		s.claims.extend(req.Key, req.Token, start.Add(req.Lease))
	}
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
