package memstore

import (
	"context"
	"iter"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/internal/memcore"
)

// DefaultCapacity is the Capacity of a Store whose Options leave it zero.
const DefaultCapacity = memcore.DefaultCapacity

// Options configures a Store. A nil *Options means all defaults; a zero
// field takes its default.
type Options struct {
	// Capacity is the number of completed and failed records kept, in the
	// whole store however it is cut into shards: past it a least recently
	// used one is evicted (see the package documentation), and a completed
	// record evicted before its retention ends lets a duplicate run again
	// (see Stats.Evictions). It bounds the processing records separately,
	// by the same number: past it Acquire fails with store.ErrUnavailable
	// rather than evict a claim. Step records are not counted: they go
	// with their record. Must not be negative. Defaults to 100_000.
	Capacity int

	// Clock is the time source of leases and retention. Defaults to
	// clock.Real().
	Clock clock.Clock
}

// Store is a store.Store held in process memory. It is safe for concurrent
// use; every method on a key takes the mutex of the key's shard once (see
// the package documentation on Capacity).
//
// The Result of a record it returns is shared with the store, so that a
// replay copies nothing: treat it as read-only.
type Store struct {
	core *memcore.Store
}

var (
	_ store.Store      = (*Store)(nil)
	_ store.Peeker     = (*Store)(nil)
	_ store.BatchStore = (*Store)(nil)
	_ store.Inspector  = (*Store)(nil)
	_ store.InProcess  = (*Store)(nil)
	_ store.StepStore  = (*Store)(nil)

	_ store.CompleteReporter = (*Store)(nil)
)

// New returns an empty Store. A nil opts means all defaults; a negative
// Capacity is an error matching store.ErrInvalidConfig.
func New(opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	core, err := memcore.New(&memcore.Options{Capacity: o.Capacity, Clock: o.Clock})
	if err != nil {
		return nil, err
	}
	return &Store{core: core}, nil
}

// Acquire claims req.Key if it is absent, failed, or processing under an
// expired lease, and reports the record holding it otherwise. It fails with
// store.ErrUnavailable when Capacity claims are already processing.
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.Claim, error) {
	return s.core.Acquire(ctx, req)
}

// Complete stores a copy of req.Result for the key held by req.Token and
// keeps it, immutable, for req.Retention. A claim whose lease expired still
// completes while no other Acquire has taken the key over. Completing again
// with the token that completed the record succeeds and changes nothing:
// the first result stays.
func (s *Store) Complete(ctx context.Context, req store.CompleteRequest) error {
	return s.core.Complete(ctx, req)
}

// CompleteReport is Complete, reporting whether this call wrote the record
// (store.CompletionWrote) or found it completed already by req.Token
// (store.CompletionUnchanged).
func (s *Store) CompleteReport(ctx context.Context, req store.CompleteRequest) (store.Completion, error) {
	return s.core.CompleteReport(ctx, req)
}

// Release records the failure of the key held by req.Token and frees the
// key for the next Acquire, which counts the next attempt. A claim whose
// lease expired is still released while no other Acquire has taken the key
// over.
func (s *Store) Release(ctx context.Context, req store.ReleaseRequest) error {
	return s.core.Release(ctx, req)
}

// Extend sets the lease of the key held by req.Token to req.Lease from now,
// even when that is earlier than the deadline it had. A claim whose lease
// expired is extended too while no other Acquire has taken the key over.
func (s *Store) Extend(ctx context.Context, req store.ExtendRequest) error {
	return s.core.Extend(ctx, req)
}

// InProcess reports true: every call completes in memory, under one
// short lock, so the receiver needs no timeout around it.
func (s *Store) InProcess() bool { return true }

// Peek returns the completed, unexpired record of prefix+id, cut as
// store.SplitKey cuts it, or nil. The record is the store's own and must
// not be modified: the first Peek of a record makes it, once, and every
// later one shares it, copying and allocating nothing.
func (s *Store) Peek(prefix, id string) *store.Record {
	return s.core.Peek(prefix, id)
}

// AcquireBatch runs Acquire for every request in order, on one clock
// reading: each request sees the ones before it (the second request of a
// key finds the first one's claim). Each takes its key's shard's lock in
// turn, so the batch is the sequence of its Acquires, not one atomic step.
func (s *Store) AcquireBatch(ctx context.Context, reqs []store.AcquireRequest) []store.AcquireOutcome {
	return s.core.AcquireBatch(ctx, reqs)
}

// CompleteBatch runs Complete for every request in order, on one clock
// reading; the error at index i belongs to reqs[i].
func (s *Store) CompleteBatch(ctx context.Context, reqs []store.CompleteRequest) []error {
	return s.core.CompleteBatch(ctx, reqs)
}

// CompleteBatchReport is CompleteBatch, reporting for each request whether
// it wrote the record or found it completed already by its token.
func (s *Store) CompleteBatchReport(ctx context.Context, reqs []store.CompleteRequest) []store.CompleteOutcome {
	return s.core.CompleteBatchReport(ctx, reqs)
}

// ExtendBatch runs Extend for every request in order, on one clock
// reading; the error at index i belongs to reqs[i].
func (s *Store) ExtendBatch(ctx context.Context, reqs []store.ExtendRequest) []error {
	return s.core.ExtendBatch(ctx, reqs)
}

// Get returns the record of key, in whatever state, with a copy of its
// step records, or an error matching store.ErrNotFound. Unlike Peek, it
// does not count as a use of the record.
func (s *Store) Get(ctx context.Context, key string) (store.Record, error) {
	return s.core.Get(ctx, key)
}

// Delete forgets key, whatever its state, with its step records: a
// duplicate arriving later is processed again, and the holder of a deleted claim gets
// store.ErrLeaseLost while a second delivery may already run beside it.
// DeleteIf removes only what no one holds.
func (s *Store) Delete(ctx context.Context, key string) error {
	return s.core.Delete(ctx, key)
}

// DeleteIf removes the record of req.Key only when req allows its state
// (store.DeleteRequest), deciding and removing under the key's shard lock,
// by the store's Clock: a processing record under a live lease stays, and
// is returned with deleted false. A deleted record's step records go with
// it. An absent key is an error matching store.ErrNotFound.
func (s *Store) DeleteIf(ctx context.Context, req store.DeleteRequest) (bool, store.Record, error) {
	return s.core.DeleteIf(ctx, req)
}

// Scan yields every unexpired record whose key starts with prefix, in key
// order, each with a copy of its step records. The records are a snapshot taken when iteration starts, so the
// loop body may call the store. A cancelled context is yielded once, as a
// zero Record with its error, and ends the scan.
func (s *Store) Scan(ctx context.Context, prefix string) iter.Seq2[store.Record, error] {
	return s.core.Scan(ctx, prefix)
}

// LoadSteps returns a copy of the step records of req.Key, in no
// particular order, when req.Token holds it, processing (its lease may have
// ended, while no other Acquire took the key over), and an error matching
// store.ErrLeaseLost otherwise. See the package documentation on step
// records.
func (s *Store) LoadSteps(ctx context.Context, req store.StepsRequest) ([]store.StepRecord, error) {
	return s.core.LoadSteps(ctx, req)
}

// SaveStep records a copy of req.Value under req.Name for req.Key, held by
// req.Token as LoadSteps requires, replacing the step record of that name;
// otherwise it fails with store.ErrLeaseLost and records nothing. A name
// that store.StepNameValid refuses fails with store.ErrInvalidConfig,
// whoever holds the key. A value of any length is kept, as a result is;
// req.Retention is not used: step records live as long as their record.
func (s *Store) SaveStep(ctx context.Context, req store.SaveStepRequest) error {
	return s.core.SaveStep(ctx, req)
}

// Stats is a snapshot of a Store's size and of what it had to forget.
type Stats struct {
	// Len is the number of completed and failed records held. Expiry is
	// lazy, so it includes expired records not yet touched or evicted.
	Len int
	// InFlight is the number of processing records, including claims whose
	// lease expired that no Acquire has taken over or swept yet.
	InFlight int
	// Capacity is the bound of Len, and separately of InFlight, for the
	// whole store.
	Capacity int
	// Evictions counts completed records evicted for room before their
	// retention ended. Each one is a key whose duplicate would run the
	// handler again; a steadily growing count means Capacity is too small
	// for the retention and the message rate. Evicted failed records and
	// expired ones are not counted: forgetting them loses an attempt count
	// at most.
	Evictions uint64
}

// Stats returns the store's current Stats.
func (s *Store) Stats() Stats {
	return Stats(s.core.Stats())
}
