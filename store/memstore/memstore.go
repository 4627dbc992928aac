package memstore

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/clock"
)

// DefaultCapacity is the Capacity of a Store whose Options leave it zero.
const DefaultCapacity = 100_000

// Options configures a Store. A nil *Options means all defaults; a zero
// field takes its default.
type Options struct {
	// Capacity bounds the completed and failed records kept: past it the
	// least recently used one is evicted, and a completed record evicted
	// before its retention ends lets a duplicate run again (see
	// Stats.Evictions). It bounds the processing records separately, by the
	// same number: past it Acquire fails with ErrStoreUnavailable rather
	// than evict a claim. Must not be negative. Defaults to 100_000.
	Capacity int

	// Clock is the time source of leases and retention. Defaults to
	// clock.Real().
	Clock clock.Clock
}

// Store is a dedup.Store held in process memory. It is safe for concurrent
// use; every method takes one mutex once.
//
// The Result of a record it returns is shared with the store, so that a
// replay copies nothing: treat it as read-only.
type Store struct {
	clock    clock.Clock
	capacity int

	mu sync.Mutex
	// settled holds completed and failed records, bounded by capacity,
	// under their keys cut in two (see dedup.SplitKey) so that Peek finds
	// them without joining namespace and id.
	settled *simplelru.LRU[splitKey, *dedup.Record]
	// claims holds processing records. They live outside the LRU because
	// evicting one would let a second delivery run while the first still
	// works: the one thing this library exists to prevent.
	claims map[string]claim
	// nextLeaseEnd is no later than the earliest LeaseUntil in claims (zero
	// when unknown), so a full Acquire can tell that no lease has expired
	// without walking every claim.
	nextLeaseEnd time.Time
	evictions    uint64
}

var (
	_ dedup.Store      = (*Store)(nil)
	_ dedup.Peeker     = (*Store)(nil)
	_ dedup.BatchStore = (*Store)(nil)
	_ dedup.Inspector  = (*Store)(nil)
)

// splitKey is a key cut by dedup.SplitKey; its parts share the key's memory.
type splitKey struct{ prefix, id string }

func split(key string) splitKey {
	prefix, id := dedup.SplitKey(key)
	return splitKey{prefix, id}
}

// claim is a processing record without the fields a processing record
// never uses, small enough for the map to keep it inline.
type claim struct {
	token       dedup.Token
	attempt     int
	fingerprint string
	lastError   string
	leaseUntil  time.Time
}

func (c *claim) record(key string) dedup.Record {
	return dedup.Record{
		Key:         key,
		State:       dedup.StateProcessing,
		Attempt:     c.attempt,
		Fingerprint: c.fingerprint,
		LastError:   c.lastError,
		LeaseUntil:  c.leaseUntil,
	}
}

// New returns an empty Store. A nil opts means all defaults.
func New(opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Capacity < 0 {
		return nil, fmt.Errorf("memstore: %w: Capacity is %d, it must not be negative", dedup.ErrInvalidConfig, o.Capacity)
	}
	o.Capacity = cmp.Or(o.Capacity, DefaultCapacity)
	if o.Clock == nil {
		o.Clock = clock.Real()
	}
	// Eviction is done by hand in settle, which must count it, so the LRU
	// gets no callback (simplelru would also call it on every Remove).
	settled, err := simplelru.NewLRU[splitKey, *dedup.Record](o.Capacity, nil)
	if err != nil {
		return nil, fmt.Errorf("memstore: %w", err)
	}
	return &Store{
		clock:    o.Clock,
		capacity: o.Capacity,
		settled:  settled,
		claims:   make(map[string]claim),
	}, nil
}

// Acquire claims key if it is absent, failed, or processing under an
// expired lease, and reports the record holding it otherwise. It fails with
// ErrStoreUnavailable when Capacity claims are already processing.
func (s *Store) Acquire(ctx context.Context, key string, req dedup.AcquireRequest) (dedup.Claim, error) {
	if err := ctx.Err(); err != nil {
		return dedup.Claim{}, fmt.Errorf("memstore: acquire %q: %w", key, err)
	}
	if err := checkAcquire(key, req); err != nil {
		return dedup.Claim{}, err
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acquire(key, req, now)
}

func checkAcquire(key string, req dedup.AcquireRequest) error {
	if key == "" {
		return errEmptyKey("acquire")
	}
	if req.Lease <= 0 {
		return fmt.Errorf("memstore: acquire %q: %w: the lease is %v, it must be positive", key, dedup.ErrInvalidConfig, req.Lease)
	}
	return nil
}

// acquire is Acquire on checked arguments, under s.mu.
func (s *Store) acquire(key string, req dedup.AcquireRequest, now time.Time) (dedup.Claim, error) {
	if c, ok := s.claims[key]; ok {
		if reused(c.fingerprint, req.Fingerprint) {
			return dedup.Claim{}, errReused(key, dedup.StateProcessing)
		}
		if now.Before(c.leaseUntil) {
			return dedup.Claim{Record: c.record(key)}, nil
		}
		// The holder's lease expired: take the key over in place, which
		// needs no room.
		c.token = dedup.NewToken()
		c.attempt++
		c.fingerprint = cmp.Or(c.fingerprint, req.Fingerprint)
		c.leaseUntil = now.Add(req.Lease)
		s.claims[key] = c
		s.noteLease(c.leaseUntil)
		return dedup.Claim{Acquired: true, Token: c.token, Record: c.record(key)}, nil
	}

	var prev dedup.Record // the failed record being retried, if any
	sk := split(key)
	if rec, ok := s.settled.Peek(sk); ok {
		switch {
		case expired(rec, now):
			s.settled.Remove(sk)
		case reused(rec.Fingerprint, req.Fingerprint):
			return dedup.Claim{}, errReused(key, rec.State)
		case rec.State == dedup.StateCompleted:
			s.settled.Get(sk) // a replayed record is in use: keep it longest
			return dedup.Claim{Record: *rec}, nil
		default:
			prev = *rec
		}
	}
	if len(s.claims) >= s.capacity && !s.sweep(now) {
		return dedup.Claim{}, fmt.Errorf("memstore: acquire %q: %w: %d records are processing, the limit set by Options.Capacity", key, dedup.ErrStoreUnavailable, len(s.claims))
	}
	if prev.State == dedup.StateFailed {
		s.settled.Remove(sk)
	}
	c := claim{
		token:       dedup.NewToken(),
		attempt:     prev.Attempt + 1,
		fingerprint: cmp.Or(prev.Fingerprint, req.Fingerprint),
		lastError:   prev.LastError,
		leaseUntil:  now.Add(req.Lease),
	}
	s.claims[key] = c
	s.noteLease(c.leaseUntil)
	return dedup.Claim{Acquired: true, Token: c.token, Record: c.record(key)}, nil
}

// noteLease keeps nextLeaseEnd no later than t, a lease just granted.
func (s *Store) noteLease(t time.Time) {
	if s.nextLeaseEnd.IsZero() || t.Before(s.nextLeaseEnd) {
		s.nextLeaseEnd = t
	}
}

// sweep forgets the claims whose lease expired, so that a worker that
// crashed does not hold room forever, and reports whether room was made.
// It walks every claim, but only once some lease has ended since the last
// walk, so a store full of live claims refuses Acquire in constant time.
func (s *Store) sweep(now time.Time) bool {
	if !s.nextLeaseEnd.IsZero() && now.Before(s.nextLeaseEnd) {
		return false
	}
	var next time.Time
	for key, c := range s.claims {
		if !now.Before(c.leaseUntil) {
			delete(s.claims, key)
			continue
		}
		if next.IsZero() || c.leaseUntil.Before(next) {
			next = c.leaseUntil
		}
	}
	s.nextLeaseEnd = next
	return len(s.claims) < s.capacity
}

// Complete stores a copy of result for the key held by token and keeps it,
// immutable, for retention. A claim whose lease expired still completes
// while no other Acquire has taken the key over.
func (s *Store) Complete(ctx context.Context, key string, token dedup.Token, result []byte, retention time.Duration) error {
	if err := checkSettle(ctx, "complete", key, token, retention); err != nil {
		return err
	}
	// Copied outside the lock: callers reuse their buffers.
	result = bytes.Clone(result)
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.complete(key, token, result, retention, now)
}

// checkSettle checks the arguments of Complete and Release. A zero token
// never holds a key, so it gets ErrLeaseLost like any other stale token.
func checkSettle(ctx context.Context, op, key string, token dedup.Token, retention time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: %s %q: %w", op, key, err)
	}
	if key == "" {
		return errEmptyKey(op)
	}
	if retention <= 0 {
		return fmt.Errorf("memstore: %s %q: %w: the retention is %v, it must be positive", op, key, dedup.ErrInvalidConfig, retention)
	}
	if token.IsZero() {
		return errLeaseLost(op, key)
	}
	return nil
}

// complete is Complete on checked arguments and a copied result, under s.mu.
func (s *Store) complete(key string, token dedup.Token, result []byte, retention time.Duration, now time.Time) error {
	return s.finish("complete", key, token, now, func(c *claim) dedup.Record {
		return dedup.Record{State: dedup.StateCompleted, Result: result, LastError: c.lastError, ExpiresAt: now.Add(retention)}
	})
}

// Release records the failure of the key held by token and frees the key
// for the next Acquire, which counts the next attempt.
func (s *Store) Release(ctx context.Context, key string, token dedup.Token, failure dedup.Failure) error {
	if err := checkSettle(ctx, "release", key, token, failure.Retention); err != nil {
		return err
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.finish("release", key, token, now, func(*claim) dedup.Record {
		return dedup.Record{State: dedup.StateFailed, LastError: failure.Error, ExpiresAt: now.Add(failure.Retention)}
	})
}

// finish ends the claim token holds on key with the settled record next
// returns, which keeps the claim's key, attempt and fingerprint. Under s.mu.
func (s *Store) finish(op, key string, token dedup.Token, now time.Time, next func(*claim) dedup.Record) error {
	c, ok := s.claims[key]
	if !ok || c.token != token {
		return errLeaseLost(op, key)
	}
	delete(s.claims, key)
	rec := next(&c)
	rec.Key, rec.Attempt, rec.Fingerprint = key, c.attempt, c.fingerprint
	s.settle(key, rec, now)
	return nil
}

// settle moves a record that left processing into the LRU, evicting the
// least recently used one when full. The key is never in the LRU already:
// Acquire removed it when it made the claim.
func (s *Store) settle(key string, rec dedup.Record, now time.Time) {
	if s.settled.Len() >= s.capacity {
		_, old, _ := s.settled.RemoveOldest()
		if old.State == dedup.StateCompleted && !expired(old, now) {
			s.evictions++
		}
	}
	// Settled records are never modified in place (Acquire removes a failed
	// one before retrying it), which is what lets Peek share them.
	s.settled.Add(split(key), &rec)
}

// Extend pushes the lease of the key held by token to lease from now. A
// claim whose lease expired is extended too while no other Acquire has
// taken the key over.
func (s *Store) Extend(ctx context.Context, key string, token dedup.Token, lease time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: extend %q: %w", key, err)
	}
	if key == "" {
		return errEmptyKey("extend")
	}
	if lease <= 0 {
		return fmt.Errorf("memstore: extend %q: %w: the lease is %v, it must be positive", key, dedup.ErrInvalidConfig, lease)
	}
	if token.IsZero() {
		return errLeaseLost("extend", key)
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.claims[key]
	if !ok || c.token != token {
		return errLeaseLost("extend", key)
	}
	c.leaseUntil = now.Add(lease)
	s.claims[key] = c
	s.noteLease(c.leaseUntil)
	return nil
}

// Peek returns the completed, unexpired record of prefix+id, cut as
// dedup.SplitKey cuts it, or nil. It allocates and copies nothing: the
// record is the store's own and must not be modified.
func (s *Store) Peek(prefix, id string) *dedup.Record {
	s.mu.Lock()
	rec, ok := s.settled.Get(splitKey{prefix, id})
	s.mu.Unlock()
	// clock.Until reads only the monotonic clock: half the price of Now.
	if !ok || rec.State != dedup.StateCompleted || clock.Until(s.clock, rec.ExpiresAt) <= 0 {
		return nil
	}
	return rec
}

// expired reports whether a completed or failed record's retention ended.
func expired(rec *dedup.Record, now time.Time) bool { return !now.Before(rec.ExpiresAt) }

// reused reports whether a claim's fingerprint contradicts the record's;
// an empty one on either side is not checked.
func reused(stored, requested string) bool {
	return stored != "" && requested != "" && stored != requested
}

func errReused(key string, state dedup.State) error {
	return fmt.Errorf("memstore: acquire %q: %w: the %s record has another fingerprint", key, dedup.ErrKeyReused, state)
}

func errLeaseLost(op, key string) error {
	return fmt.Errorf("memstore: %s %q: %w", op, key, dedup.ErrLeaseLost)
}

func errEmptyKey(op string) error {
	return fmt.Errorf("memstore: %s: %w: the key is empty", op, dedup.ErrInvalidKey)
}
