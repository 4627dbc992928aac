package memcore

import (
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
	// Capacity bounds the completed and failed records kept in the whole
	// store (a least recently used one is evicted past it: see Store), and
	// separately the processing claims (Acquire fails with
	// store.ErrUnavailable past it). Must not be negative. Defaults to
	// DefaultCapacity.
	Capacity int

	// Clock is the time source of leases and retention. Defaults to
	// clock.Real().
	Clock clock.Clock
}

// Store is a store.Store held in process memory. It is safe for concurrent
// use; every method on a key takes the mutex of the key's shard once (and
// another shard's after it, rarely: see evictElsewhere), never two at once.
//
// A store of Capacity 2*shardMin (8,192) or more is cut into shards (up to
// maxShards, a power of two) by a hash of the key's id, each with its own
// mutex, LRU and claims, so that deliveries of different keys rarely wait
// for one another (a new message under eight concurrent workers cost 1.8
// to 2.5 µs through the receiver, where one lock for the whole store cost
// 2.7 to 3.5, in alternating runs here). Capacity bounds the whole store,
// not a share of it per shard: shards fill unevenly, and a store of
// Capacity 101,000 cut into shares of it kept 99,981 of 100,000 keys. Two
// counters shared by the shards hold the totals; when the store is full,
// the new record's shard evicts its own least recently used record (or,
// holding none, another shard does), so the LRU order is per shard.
//
// The Result of a record it returns is shared with the store, so that a
// replay copies nothing: treat it as read-only.
type Store struct {
	clock    clock.Clock
	capacity int64
	// epoch is the clock's reading when the store was made: records keep
	// their expiry as an offset from it.
	epoch  time.Time
	seed   maphash.Seed // of ids: chooses the shard
	pseed  maphash.Seed // of prefixes: mixed in for the shard's records
	mask   uint64       // len(shards) - 1
	shards []shard
	// The counters every shard writes, each on a cache line of its own,
	// away from the fields every call reads.
	_       [64]byte
	settled atomic.Int64 // completed and failed records, of all shards
	_       [56]byte
	claims  atomic.Int64 // processing records, of all shards
	_       [56]byte
}

// Shards: one per shardMin records of Capacity, a power of two, at most
// maxShards. A small store is one shard.
const (
	shardMin  = 4096
	maxShards = 16
)

// shard is a part of a Store: the records of the keys that hash to it.
type shard struct {
	mu    sync.Mutex
	store *Store
	// settled holds completed and failed records under their keys cut in
	// two (see store.SplitKey), so that Peek finds them without joining
	// namespace and id.
	settled records
	// claims holds processing records. They live outside the LRU because
	// evicting one would let a second delivery run while the first still
	// works: the one thing this library exists to prevent. A key is in
	// claims or in settled, never in both.
	claims map[string]claim
	// nextLeaseEnd is no later than the earliest LeaseUntil in claims (zero
	// when unknown), so a full Acquire can tell that no lease has expired
	// without walking every claim.
	nextLeaseEnd time.Time
	// steps holds the step records of the keys that have any, claimed or
	// settled (steps.go); nil until the shard's first SaveStep.
	steps     map[string][]step
	evictions uint64
	_         [64]byte // keeps neighbouring shards' mutexes off one cache line
}

var (
	_ store.Store      = (*Store)(nil)
	_ store.Peeker     = (*Store)(nil)
	_ store.BatchStore = (*Store)(nil)
	_ store.Inspector  = (*Store)(nil)
	_ store.StepStore  = (*Store)(nil)

	_ store.CompleteReporter = (*Store)(nil)
)

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
		capacity: int64(o.Capacity),
		epoch:    o.Clock.Now(),
		seed:     maphash.MakeSeed(),
		pseed:    maphash.MakeSeed(),
		mask:     uint64(n - 1),
		shards:   make([]shard, n),
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.store = s
		sh.settled.init()
		sh.claims = make(map[string]claim)
	}
	return s, nil
}

// locate returns the shard of key and the key as the shard's records find
// it. The shard goes by the hash of its id (store.SplitKey) alone, the
// records by that hash mixed with one of the prefix (the namespace), so
// that Peek, which has the key cut in two, finds it without joining its
// parts, and one id in many namespaces (a namespace per tenant) is many
// hashes, not one.
func (s *Store) locate(key string) (*shard, lkey) {
	prefix, id := store.SplitKey(key)
	return s.locateID(prefix, id)
}

// locateID is locate of the key cut into prefix and id.
func (s *Store) locateID(prefix, id string) (*shard, lkey) {
	h := maphash.String(s.seed, id)
	return &s.shards[h&s.mask], lkey{prefix: prefix, id: id, h: h ^ maphash.String(s.pseed, prefix)}
}

// at returns now as an offset from the store's epoch, as records keep
// their expiry.
func (s *Store) at(now time.Time) int64 { return int64(now.Sub(s.epoch)) }

// later returns at + d, saturated: a retention too long to count in
// nanoseconds from the epoch is forever, not the past.
func later(at int64, d time.Duration) int64 {
	if sum := at + int64(d); d <= 0 || sum >= at {
		return sum
	}
	return math.MaxInt64
}

// Acquire claims req.Key if it is absent, failed, or processing under an
// expired lease, and reports the record holding it otherwise. It fails with
// store.ErrUnavailable when Capacity claims are already processing.
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
		if !req.Token.IsZero() && req.Token == c.token {
			// The caller asks again for its own claim, whose answer it
			// lost: the same claim, its lease from now.
			c.leaseUntil = now.Add(req.Lease)
			s.claims[key] = c
			s.noteLease(c.leaseUntil)
			return store.Claim{Acquired: true, Token: c.token, Record: c.record(key)}, nil
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
		c.token = tokenOf(req)
		c.attempt++
		c.fingerprint = cmp.Or(c.fingerprint, req.Fingerprint)
		c.leaseUntil = now.Add(req.Lease)
		s.claims[key] = c
		s.noteLease(c.leaseUntil)
		return store.Claim{Acquired: true, Token: c.token, Record: c.record(key)}, nil
	}

	var prev uint32 // the slot of the failed record being retried, if any
	if i := s.settled.find(&k); i != 0 {
		e := s.settled.at(i)
		switch {
		case e.expired(s.store.at(now)):
			s.forgetSlotSteps(i) // the record is gone: a fresh one starts
			s.remove(i)
		case req.Fingerprint != "" && reused(e.fingerprint(), req.Fingerprint):
			return store.Claim{}, errReused(key, e.state())
		case e.completed():
			s.settled.use(i) // a replayed record is in use: keep it longest
			return store.Claim{Record: e.record(s.store.epoch)}, nil
		default:
			prev = i
		}
	}
	if !s.claimRoom(now) {
		return store.Claim{}, fmt.Errorf("memstore: acquire %q: %w: Options.Capacity (%d) records are processing", key, store.ErrUnavailable, s.store.capacity)
	}
	c := claim{
		token:       tokenOf(req),
		attempt:     1,
		fingerprint: req.Fingerprint,
		leaseUntil:  now.Add(req.Lease),
		createdAt:   now.UnixNano(),
	}
	if prev != 0 {
		// A retry: the failed record's history goes on.
		e := s.settled.at(prev)
		_, fingerprint, lastError, _ := e.parts()
		c.attempt = e.attempt() + 1
		c.fingerprint = cmp.Or(fingerprint, req.Fingerprint)
		c.lastError = lastError
		c.createdAt = cmp.Or(e.created, c.createdAt)
		s.remove(prev) // its step records stay, the claim's now
	}
	s.claims[key] = c
	s.noteLease(c.leaseUntil)
	return store.Claim{Acquired: true, Token: c.token, Record: c.record(key)}, nil
}

// claimRoom counts a new claim against Capacity, and reports whether there
// was room for it. When the store holds Capacity claims already, it sweeps
// the shard's expired ones first. Under s.mu.
func (s *shard) claimRoom(now time.Time) bool {
	n := &s.store.claims
	if n.Add(1) <= s.store.capacity {
		return true
	}
	s.sweep(now)
	if n.Load() <= s.store.capacity {
		return true
	}
	n.Add(-1)
	return false
}

// noteLease keeps nextLeaseEnd no later than t, a lease just granted.
func (s *shard) noteLease(t time.Time) {
	if s.nextLeaseEnd.IsZero() || t.Before(s.nextLeaseEnd) {
		s.nextLeaseEnd = t
	}
}

// sweep forgets the shard's claims whose lease expired, so that a worker
// that crashed does not hold room forever. It walks every claim, but only
// once some lease has ended since the last walk, so a store full of live
// claims refuses Acquire in constant time. A swept claim is gone with its
// attempt count and its step records; its holder's later calls fail with
// ErrLeaseLost, all of them. Expired claims of other shards stay until an Acquire of theirs
// needs room.
func (s *shard) sweep(now time.Time) {
	if !s.nextLeaseEnd.IsZero() && now.Before(s.nextLeaseEnd) {
		return
	}
	var next time.Time
	for key, c := range s.claims {
		if !now.Before(c.leaseUntil) {
			s.dropClaim(key)
			s.forgetSteps(key)
			continue
		}
		if next.IsZero() || c.leaseUntil.Before(next) {
			next = c.leaseUntil
		}
	}
	s.nextLeaseEnd = next
}

// dropClaim forgets the claim of key, which is held.
func (s *shard) dropClaim(key string) {
	delete(s.claims, key)
	s.store.claims.Add(-1)
}

// remove forgets the settled record in slot i.
func (s *shard) remove(i uint32) {
	s.settled.remove(i)
	s.store.settled.Add(-1)
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
	st := completing(req)
	now := s.clock.Now()
	sh, k := s.locate(req.Key)
	sh.mu.Lock()
	done, owed, err := sh.complete(&st, k, now)
	sh.mu.Unlock()
	if owed {
		s.evictElsewhere(sh, now)
	}
	return done, err
}

// settling is a completion or a release on its way to the record it
// settles: what finish needs besides the claim.
type settling struct {
	op        string // "complete" or "release"
	key       string
	token     store.Token
	retention time.Duration
	failed    bool
	lastError string // of a release
	result    []byte // of a completion
	// data and packed are the record's data (blob.go) as if the claim had
	// no fingerprint and, completing, no last error, made before the lock
	// (callers reuse their buffers, and an allocation under the lock makes
	// every other delivery of the shard wait for it): most claims have
	// neither. finish packs the record of a claim that has them again,
	// under the lock.
	data   string
	packed bool
}

// completing returns the settling of req.
func completing(req store.CompleteRequest) settling {
	st := settling{op: "complete", key: req.Key, token: req.Token, retention: req.Retention, result: req.Result}
	st.data, st.packed = pack(req.Key, "", "", req.Result)
	return st
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

// complete is CompleteReport of st, its key located as k, under s.mu. It
// reports whether another shard owes an eviction (settle).
func (s *shard) complete(st *settling, k lkey, now time.Time) (store.Completion, bool, error) {
	if _, ok := s.claims[st.key]; !ok {
		// A record completed in the handler's own transaction may be
		// completed again by its receiver: the first result stays.
		if i := s.settled.find(&k); i != 0 {
			e := s.settled.at(i)
			if e.token == st.token && !e.remembered() && e.completed() && !e.expired(s.store.at(now)) {
				return store.CompletionUnchanged, false, nil
			}
		}
	}
	owed, err := s.finish(st, k, now)
	if err != nil {
		return store.CompletionUnknown, false, err
	}
	return store.CompletionWrote, owed, nil
}

// Release records the failure of the key held by req.Token and frees the
// key for the next Acquire, which counts the next attempt. A claim whose
// lease expired is still released while no other Acquire has taken the key
// over.
func (s *Store) Release(ctx context.Context, req store.ReleaseRequest) error {
	if err := checkSettle(ctx, "release", req.Key, req.Token, req.Retention); err != nil {
		return err
	}
	st := settling{op: "release", key: req.Key, token: req.Token, retention: req.Retention, failed: true, lastError: req.Error}
	st.data, st.packed = pack(req.Key, "", req.Error, nil)
	now := s.clock.Now()
	sh, k := s.locate(req.Key)
	sh.mu.Lock()
	owed, err := sh.finish(&st, k, now)
	sh.mu.Unlock()
	if owed {
		s.evictElsewhere(sh, now)
	}
	return err
}

// finish ends the claim st.token holds on st.key, located as k, with the
// settled record st makes of it, which takes the claim's attempt,
// fingerprint, token and creation, and, when completed, the claim's last
// error; now is when it completed or failed. It reports whether another
// shard owes an eviction (settle). Under s.mu.
func (s *shard) finish(st *settling, k lkey, now time.Time) (bool, error) {
	c, ok := s.claims[st.key]
	if !ok || c.token != st.token {
		return false, errLeaseLost(st.op, st.key)
	}
	s.dropClaim(st.key) // its step records stay, the settled record's now
	var flags uint32
	lastError := c.lastError
	if st.failed {
		flags, lastError = metaFailed, st.lastError
	}
	data, packed := st.data, st.packed
	if c.fingerprint != "" || lastError != st.lastError {
		data, packed = pack(st.key, c.fingerprint, lastError, st.result)
	}
	if packed {
		flags |= metaPacked
	}
	at := s.store.at(now)
	e := slot{
		data:    data,
		token:   st.token,
		created: c.createdAt,
		done:    now.UnixNano(),
		expires: later(at, st.retention),
		hash:    k.hash(),
	}
	e.setMeta(c.attempt, flags)
	return s.settle(e, at), nil
}

// settle adds e, a record that left processing, as the most recently used
// one of the shard. When that makes more than Capacity in the store, it
// evicts the shard's least recently used record; it reports whether it
// could not, holding no other, so that another shard owes the eviction
// (Store.evictElsewhere, after this shard's mutex is released, as two
// shards' are never held at once). The key is never in settled already:
// Acquire removed it when it made the claim. at is now (Store.at). Under
// s.mu.
//
// Settled records are never modified in place (Acquire removes a failed
// one before retrying it), which is what lets Peek share what it makes of
// them.
func (s *shard) settle(e slot, at int64) (owed bool) {
	if s.store.settled.Add(1) > s.store.capacity {
		if s.settled.len() > 0 {
			s.evictOldest(at)
		} else {
			owed = true
		}
	}
	s.settled.add(e)
	return owed
}

// evictOldest evicts the shard's least recently used record, counting it
// when it was completed and unexpired. Under s.mu.
func (s *shard) evictOldest(at int64) {
	i := s.settled.oldest()
	if e := s.settled.at(i); e.completed() && !e.expired(at) {
		s.evictions++
	}
	s.forgetSlotSteps(i)
	s.remove(i)
}

// evictElsewhere evicts the least recently used record of a shard other
// than from, which settled a record while it held none and the store held
// Capacity, unless the store is back within Capacity by then.
func (s *Store) evictElsewhere(from *shard, now time.Time) {
	at := s.at(now)
	for i := range s.shards {
		sh := &s.shards[i]
		if sh == from {
			continue
		}
		sh.mu.Lock()
		full := s.settled.Load() > s.capacity
		if full && sh.settled.len() > 0 {
			sh.evictOldest(at)
			full = false
		}
		sh.mu.Unlock()
		if !full {
			return
		}
	}
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
// not be modified: the first Peek of a record makes it (one allocation,
// under the shard's mutex, as the record's slot may hold another record
// once it is released), the later ones share it and allocate nothing.
func (s *Store) Peek(prefix, id string) *store.Record {
	sh, k := s.locateID(prefix, id)
	sh.mu.Lock()
	i := sh.settled.find(&k)
	if i == 0 {
		sh.mu.Unlock()
		return nil
	}
	sh.settled.use(i)
	e := sh.settled.at(i)
	if !e.completed() {
		sh.mu.Unlock()
		return nil
	}
	if e.peeked == nil {
		rec := e.record(s.epoch)
		e.peeked = &rec
	}
	rec, expires := e.peeked, e.expires
	sh.mu.Unlock()
	// since reads only the monotonic clock: half the price of Now.
	if int64(since(s.clock, s.epoch)) >= expires {
		return nil
	}
	return rec
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

// tokenOf is the token a claim of req is made with: the caller's, or a
// fresh one.
func tokenOf(req store.AcquireRequest) store.Token {
	if req.Token.IsZero() {
		return store.NewToken()
	}
	return req.Token
}
