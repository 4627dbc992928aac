package memcore

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/store"
)

// DefaultCapacity is the Capacity of a Store whose Options leave it zero.
const DefaultCapacity = 100_000

// Options configures a Store. A nil *Options means all defaults; a zero
// field takes its default.
type Options struct {
	// Capacity bounds the completed and failed records kept (the least
	// recently used one is evicted past it), and separately the processing
	// claims (Acquire fails with store.ErrUnavailable past it). Must not be
	// negative. Defaults to DefaultCapacity.
	Capacity int

	// Clock is the time source of leases and retention. Defaults to
	// clock.Real().
	Clock clock.Clock
}

// Store is a store.Store held in process memory. It is safe for concurrent
// use; every method on a key takes the mutex of the key's shard once.
//
// A store of Capacity 2*shardMin (8,192) or more is cut into shards (up to
// maxShards, a power of two) by a hash of the key's id, each with its own
// mutex, LRU and claims, and its share of Capacity, so that deliveries of
// different keys rarely wait for one another (a new message under eight
// concurrent workers cost 1.8 to 2.5 µs through the receiver, where one
// lock for the whole store cost 2.7 to 3.5, in alternating runs here). The
// LRU order and the bound of claims are per shard.
//
// The Result of a record it returns is shared with the store, so that a
// replay copies nothing: treat it as read-only.
type Store struct {
	clock    clock.Clock
	capacity int
	seed     maphash.Seed // of ids: chooses the shard
	pseed    maphash.Seed // of prefixes: mixed in for the shard's LRU
	mask     uint64       // len(shards) - 1
	shards   []shard
}

// Shards: one per shardMin records of Capacity, a power of two, at most
// maxShards. A small store is one shard, exactly bounded.
const (
	shardMin  = 4096
	maxShards = 16
)

// shard is a part of a Store: the records of the keys that hash to it.
type shard struct {
	mu       sync.Mutex
	capacity int // this shard's share of the Store's
	// settled holds completed and failed records, bounded by capacity,
	// under their keys cut in two (see store.SplitKey) so that Peek finds
	// them without joining namespace and id.
	settled lru
	// claims holds processing records. They live outside the LRU because
	// evicting one would let a second delivery run while the first still
	// works: the one thing this library exists to prevent. A key is in
	// claims or in settled, never in both.
	claims map[string]claim
	// nextLeaseEnd is no later than the earliest LeaseUntil in claims (zero
	// when unknown), so a full Acquire can tell that no lease has expired
	// without walking every claim.
	nextLeaseEnd time.Time
	evictions    uint64
	_            [64]byte // keeps neighbouring shards' mutexes off one cache line
}

var (
	_ store.Store      = (*Store)(nil)
	_ store.Peeker     = (*Store)(nil)
	_ store.BatchStore = (*Store)(nil)
	_ store.Inspector  = (*Store)(nil)

	_ store.CompleteReporter = (*Store)(nil)
)

// entry is a settled (completed or failed) record, kept in fewer bytes
// than the store.Record it answers with: a store.Record is 200 bytes, with
// three times of 24, and an entry that held one took 256 of the heap per
// record, where this one takes 176. Times an answer needs exact (ExpiresAt,
// which Peek compares on the monotonic clock) stay time.Time; the others
// are Unix nanoseconds.
//
// Its fields are never modified once settled, but for the LRU links (under
// the shard's mutex) and peeked (atomic), so they may be read without the
// lock by whoever found the entry under it.
type entry struct {
	key         string
	fingerprint string
	lastError   string
	result      []byte
	expiresAt   time.Time
	// token is the token of the claim that completed or released the
	// record (Record.Token). Complete with it again succeeds without a
	// change, unless remembered: no token completes a record that another
	// store holds.
	token store.Token
	// createdAt and completedAt are Record.CreatedAt and CompletedAt, in
	// Unix nanoseconds; 0 when unknown (a remembered record without them).
	createdAt, completedAt int64
	attempt                int32
	state                  store.State
	remembered             bool
	// peeked is the record Peek answers with, made at the first Peek and
	// shared by the later ones: most records are never peeked, and those
	// that are pay for their store.Record once.
	peeked atomic.Pointer[store.Record]
	// hash is the hash of key as the LRU finds it (lkey.h). hnext chains
	// the entries under one hash, and prev and next link the entry into
	// its shard's LRU list (lru.go), under the shard's mutex.
	hash       uint64
	hnext      *entry
	prev, next *entry
}

// record returns the record e holds.
func (e *entry) record() store.Record {
	return store.Record{
		Key:         e.key,
		State:       e.state,
		Attempt:     int(e.attempt),
		Fingerprint: e.fingerprint,
		Result:      e.result,
		LastError:   e.lastError,
		ExpiresAt:   e.expiresAt,
		Token:       e.token,
		CreatedAt:   fromUnixNano(e.createdAt),
		CompletedAt: fromUnixNano(e.completedAt),
	}
}

// peek returns the record Peek answers for e, made once and shared.
func (e *entry) peek() *store.Record {
	if rec := e.peeked.Load(); rec != nil {
		return rec
	}
	rec := e.record()
	if e.peeked.CompareAndSwap(nil, &rec) {
		return &rec
	}
	return e.peeked.Load()
}

// expired reports whether e's retention ended by now.
func (e *entry) expired(now time.Time) bool { return !now.Before(e.expiresAt) }

// unixNano returns t in Unix nanoseconds, 0 for the zero time.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// fromUnixNano is the inverse of unixNano.
func fromUnixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// claim is a processing record without the fields a processing record
// never uses, small enough for the map to keep it inline.
type claim struct {
	token       store.Token
	attempt     int
	fingerprint string
	lastError   string
	leaseUntil  time.Time
	// createdAt is when the key's first claim was made, in Unix
	// nanoseconds: kept by takeovers and retries.
	createdAt int64
}

func (c *claim) record(key string) store.Record {
	return store.Record{
		Key:         key,
		State:       store.StateProcessing,
		Attempt:     c.attempt,
		Fingerprint: c.fingerprint,
		LastError:   c.lastError,
		LeaseUntil:  c.leaseUntil,
		Token:       c.token,
		CreatedAt:   fromUnixNano(c.createdAt),
	}
}

// New returns an empty Store. A nil opts means all defaults.
func New(opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Capacity < 0 {
		return nil, fmt.Errorf("memstore: %w: Capacity is %d, it must not be negative", store.ErrInvalidConfig, o.Capacity)
	}
	o.Capacity = cmp.Or(o.Capacity, DefaultCapacity)
	if o.Clock == nil {
		o.Clock = clock.Real()
	}
	n := 1
	for n < maxShards && o.Capacity/(2*n) >= shardMin {
		n *= 2
	}
	s := &Store{
		clock:    o.Clock,
		capacity: o.Capacity,
		seed:     maphash.MakeSeed(),
		pseed:    maphash.MakeSeed(),
		mask:     uint64(n - 1),
		shards:   make([]shard, n),
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.capacity = (o.Capacity + n - 1) / n
		sh.settled.init()
		sh.claims = make(map[string]claim)
	}
	return s, nil
}

// locate returns the shard of key and the key as the shard's LRU finds
// it. The shard goes by the hash of its id (store.SplitKey) alone, the LRU
// by that hash mixed with one of the prefix (the namespace), so that Peek,
// which has the key cut in two, finds it without joining its parts, and
// one id in many namespaces (a namespace per tenant) makes no long chain.
func (s *Store) locate(key string) (*shard, lkey) {
	prefix, id := store.SplitKey(key)
	return s.locateID(prefix, id)
}

// locateID is locate of the key cut into prefix and id.
func (s *Store) locateID(prefix, id string) (*shard, lkey) {
	h := maphash.String(s.seed, id)
	return &s.shards[h&s.mask], lkey{prefix: prefix, id: id, h: h ^ maphash.String(s.pseed, prefix)}
}

// Acquire claims req.Key if it is absent, failed, or processing under an
// expired lease, and reports the record holding it otherwise. It fails with
// store.ErrUnavailable when Capacity claims are already processing (the
// key's shard's share of them, in a store cut into shards).
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.Claim, error) {
	if err := ctx.Err(); err != nil {
		return store.Claim{}, fmt.Errorf("memstore: acquire %q: %w", req.Key, err)
	}
	if err := checkAcquire(req); err != nil {
		return store.Claim{}, err
	}
	now := s.clock.Now()
	sh, k := s.locate(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.acquire(req, k, now)
}

func checkAcquire(req store.AcquireRequest) error {
	if req.Key == "" {
		return errEmptyKey("acquire")
	}
	if req.Lease <= 0 {
		return fmt.Errorf("memstore: acquire %q: %w: the lease is %v, it must be positive", req.Key, store.ErrInvalidConfig, req.Lease)
	}
	return nil
}

// acquire is Acquire on checked arguments, req.Key located as k, under
// s.mu.
func (s *shard) acquire(req store.AcquireRequest, k lkey, now time.Time) (store.Claim, error) {
	key := req.Key
	if c, ok := s.claims[key]; ok {
		// The fingerprint is checked first: a reused key is refused even
		// when the lease expired and an equal fingerprint would take over.
		if reused(c.fingerprint, req.Fingerprint) {
			return store.Claim{}, errReused(key, store.StateProcessing)
		}
		if now.Before(c.leaseUntil) {
			// Refused: the answer leaves out the live holder's token,
			// which fences its claim.
			rec := c.record(key)
			rec.Token = store.Token{}
			return store.Claim{Record: rec}, nil
		}
		// The holder's lease expired: take the key over in place, which
		// needs no room.
		c.token = store.NewToken()
		c.attempt++
		c.fingerprint = cmp.Or(c.fingerprint, req.Fingerprint)
		c.leaseUntil = now.Add(req.Lease)
		s.claims[key] = c
		s.noteLease(c.leaseUntil)
		return store.Claim{Acquired: true, Token: c.token, Record: c.record(key)}, nil
	}

	var prev *entry // the failed record being retried, if any
	if e, ok := s.settled.peek(k); ok {
		switch {
		case e.expired(now):
			s.settled.remove(k)
		case reused(e.fingerprint, req.Fingerprint):
			return store.Claim{}, errReused(key, e.state)
		case e.state == store.StateCompleted:
			s.settled.get(k) // a replayed record is in use: keep it longest
			return store.Claim{Record: e.record()}, nil
		default:
			prev = e
		}
	}
	if len(s.claims) >= s.capacity && !s.sweep(now) {
		return store.Claim{}, fmt.Errorf("memstore: acquire %q: %w: %d records of its shard are processing, the shard's share of Options.Capacity", key, store.ErrUnavailable, len(s.claims))
	}
	c := claim{
		token:       store.NewToken(),
		attempt:     1,
		fingerprint: req.Fingerprint,
		leaseUntil:  now.Add(req.Lease),
		createdAt:   now.UnixNano(),
	}
	if prev != nil {
		// A retry: the failed record's history goes on.
		s.settled.remove(k)
		c.attempt = int(prev.attempt) + 1
		c.fingerprint = cmp.Or(prev.fingerprint, req.Fingerprint)
		c.lastError = prev.lastError
		c.createdAt = cmp.Or(prev.createdAt, c.createdAt)
	}
	s.claims[key] = c
	s.noteLease(c.leaseUntil)
	return store.Claim{Acquired: true, Token: c.token, Record: c.record(key)}, nil
}

// noteLease keeps nextLeaseEnd no later than t, a lease just granted.
func (s *shard) noteLease(t time.Time) {
	if s.nextLeaseEnd.IsZero() || t.Before(s.nextLeaseEnd) {
		s.nextLeaseEnd = t
	}
}

// sweep forgets the claims whose lease expired, so that a worker that
// crashed does not hold room forever, and reports whether room was made.
// It walks every claim, but only once some lease has ended since the last
// walk, so a store full of live claims refuses Acquire in constant time.
// A swept claim is gone with its attempt count; its holder's later calls
// fail with ErrLeaseLost, all of them.
func (s *shard) sweep(now time.Time) bool {
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

// Complete stores a copy of req.Result for the key held by req.Token and
// keeps it, immutable, for req.Retention. A claim whose lease expired still
// completes while no other Acquire has taken the key over. Completing again
// with the token that completed the record succeeds and changes nothing.
func (s *Store) Complete(ctx context.Context, req store.CompleteRequest) error {
	_, err := s.CompleteReport(ctx, req)
	return err
}

// CompleteReport is Complete, reporting whether this call wrote the record
// or found it completed already by req.Token.
func (s *Store) CompleteReport(ctx context.Context, req store.CompleteRequest) (store.Completion, error) {
	if err := checkSettle(ctx, "complete", req.Key, req.Token, req.Retention); err != nil {
		return store.CompletionUnknown, err
	}
	// Made outside the lock: callers reuse their buffers, and an
	// allocation under the lock makes every other delivery wait for it.
	e := completedEntry(req)
	now := s.clock.Now()
	sh, k := s.locate(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.complete(req, k, e, now)
}

// completedEntry returns the entry req would settle, with a copy of its
// result, for complete to date.
func completedEntry(req store.CompleteRequest) *entry {
	return &entry{state: store.StateCompleted, result: bytes.Clone(req.Result)}
}

// checkSettle checks the arguments of Complete and Release. A zero token
// never holds a key, so it gets ErrLeaseLost like any other stale token.
func checkSettle(ctx context.Context, op, key string, token store.Token, retention time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: %s %q: %w", op, key, err)
	}
	if key == "" {
		return errEmptyKey(op)
	}
	if retention <= 0 {
		return fmt.Errorf("memstore: %s %q: %w: the retention is %v, it must be positive", op, key, store.ErrInvalidConfig, retention)
	}
	if token.IsZero() {
		return errLeaseLost(op, key)
	}
	return nil
}

// complete is CompleteReport on checked arguments, req.Key located as k,
// and the entry made for them by completedEntry, under s.mu.
func (s *shard) complete(req store.CompleteRequest, k lkey, e *entry, now time.Time) (store.Completion, error) {
	if _, ok := s.claims[req.Key]; !ok {
		// A record completed in the handler's own transaction may be
		// completed again by its receiver: the first result stays.
		if e, ok := s.settled.peek(k); ok && e.token == req.Token && !e.remembered &&
			e.state == store.StateCompleted && !e.expired(now) {
			return store.CompletionUnchanged, nil
		}
	}
	e.expiresAt = now.Add(req.Retention)
	if err := s.finish("complete", req.Key, k, req.Token, now, e); err != nil {
		return store.CompletionUnknown, err
	}
	return store.CompletionWrote, nil
}

// Release records the failure of the key held by req.Token and frees the
// key for the next Acquire, which counts the next attempt. A claim whose
// lease expired is still released while no other Acquire has taken the key
// over.
func (s *Store) Release(ctx context.Context, req store.ReleaseRequest) error {
	if err := checkSettle(ctx, "release", req.Key, req.Token, req.Retention); err != nil {
		return err
	}
	e := &entry{state: store.StateFailed, lastError: req.Error}
	now := s.clock.Now()
	sh, k := s.locate(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e.expiresAt = now.Add(req.Retention)
	return sh.finish("release", req.Key, k, req.Token, now, e)
}

// finish ends the claim token holds on key, located as k, with the settled
// entry e, which takes the claim's key, attempt, fingerprint, token and
// creation, and, when completed, the claim's last error; now is when it
// completed or failed. Under s.mu.
func (s *shard) finish(op, key string, k lkey, token store.Token, now time.Time, e *entry) error {
	c, ok := s.claims[key]
	if !ok || c.token != token {
		return errLeaseLost(op, key)
	}
	delete(s.claims, key)
	if e.state == store.StateCompleted {
		e.lastError = c.lastError
	}
	e.key, e.attempt, e.fingerprint = key, int32(min(c.attempt, math.MaxInt32)), c.fingerprint
	e.token, e.createdAt, e.completedAt = token, c.createdAt, now.UnixNano()
	e.hash = k.h
	s.settle(e, now)
	return nil
}

// settle moves a record that left processing into the LRU, evicting the
// least recently used one when full. The key is never in the LRU already:
// Acquire removed it when it made the claim. e.hash is set.
func (s *shard) settle(e *entry, now time.Time) {
	if s.settled.len() >= s.capacity {
		old := s.settled.removeOldest()
		if old.state == store.StateCompleted && !old.expired(now) {
			s.evictions++
		}
	}
	// Settled entries are never modified in place (Acquire removes a failed
	// one before retrying it), which is what lets Peek share them.
	s.settled.add(e)
}

// Extend sets the lease of the key held by req.Token to req.Lease from now,
// even when that is earlier than the deadline it had. A claim whose lease
// expired is extended too while no other Acquire has taken the key over.
func (s *Store) Extend(ctx context.Context, req store.ExtendRequest) error {
	if err := checkExtend(ctx, req); err != nil {
		return err
	}
	now := s.clock.Now()
	sh, _ := s.locate(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.extend(req, now)
}

func checkExtend(ctx context.Context, req store.ExtendRequest) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: extend %q: %w", req.Key, err)
	}
	if req.Key == "" {
		return errEmptyKey("extend")
	}
	if req.Lease <= 0 {
		return fmt.Errorf("memstore: extend %q: %w: the lease is %v, it must be positive", req.Key, store.ErrInvalidConfig, req.Lease)
	}
	if req.Token.IsZero() {
		return errLeaseLost("extend", req.Key)
	}
	return nil
}

// extend is Extend on checked arguments, under s.mu.
func (s *shard) extend(req store.ExtendRequest, now time.Time) error {
	c, ok := s.claims[req.Key]
	if !ok || c.token != req.Token {
		return errLeaseLost("extend", req.Key)
	}
	c.leaseUntil = now.Add(req.Lease)
	s.claims[req.Key] = c
	s.noteLease(c.leaseUntil)
	return nil
}

// Peek returns the completed, unexpired record of prefix+id, cut as
// store.SplitKey cuts it, or nil. The record is the store's own and must
// not be modified: the first Peek of a record makes it (one allocation),
// the later ones share it and allocate nothing.
func (s *Store) Peek(prefix, id string) *store.Record {
	sh, k := s.locateID(prefix, id)
	sh.mu.Lock()
	e, ok := sh.settled.get(k)
	sh.mu.Unlock()
	// until reads only the monotonic clock: half the price of Now.
	if !ok || e.state != store.StateCompleted || until(s.clock, e.expiresAt) <= 0 {
		return nil
	}
	return e.peek()
}

// reused reports whether a claim's fingerprint contradicts the record's;
// an empty one on either side is not checked.
func reused(stored, requested string) bool {
	return stored != "" && requested != "" && stored != requested
}

func errReused(key string, state store.State) error {
	return fmt.Errorf("memstore: acquire %q: %w: the %s record has another fingerprint", key, store.ErrKeyReused, state)
}

func errLeaseLost(op, key string) error {
	return fmt.Errorf("memstore: %s %q: %w", op, key, store.ErrLeaseLost)
}

func errEmptyKey(op string) error {
	return fmt.Errorf("memstore: %s: %w: the key is empty", op, store.ErrInvalidKey)
}
