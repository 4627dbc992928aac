package store

import (
	"context"
	"iter"
	"strings"
	"time"
)

// Store keeps one record per key and moves it through the state machine of
// the package documentation. Every method is one atomic step on one key and
// takes a request struct, so that fields can be added without breaking
// implementations.
//
// Keys are non-empty strings chosen by the receiver (namespace, a colon,
// and the message id); a store must not interpret them. Implementations
// must be safe for concurrent use and should pass storetest.Run.
type Store interface {
	// Acquire claims req.Key for the caller if it is absent, failed, or
	// processing under an expired lease, and reports the record holding it
	// otherwise. Check and claim are one atomic step.
	Acquire(ctx context.Context, req AcquireRequest) (Claim, error)

	// Complete stores req.Result for the key held by req.Token and keeps it,
	// immutable, for req.Retention.
	Complete(ctx context.Context, req CompleteRequest) error

	// Release gives up the key held by req.Token and records the failure, so
	// the next Acquire may try again. The failed record is kept for
	// req.Retention, remembering the attempt count.
	Release(ctx context.Context, req ReleaseRequest) error

	// Extend sets the lease of the key held by req.Token to req.Lease from
	// now.
	Extend(ctx context.Context, req ExtendRequest) error
}

// Peeker is an optional ability of stores that can answer for a completed
// record from process memory, without I/O (memstore, the local tier of
// tieredstore). The receiver asks it before anything else, so a duplicate of
// a completed message costs no round trip and no allocation.
//
// The key comes in two parts, as [SplitKey] cuts it: prefix is the key up to
// and including its first ':' (the receiver's namespace), id the rest. The
// receiver never has to join them for a duplicate, and a store may keep
// its records under the two parts. A store may answer nil for a key cut
// any other way; it must never answer with another key's record.
type Peeker interface {
	// Peek returns the completed record held for prefix+id in memory, or
	// nil. It must never return a record that is not completed or expired,
	// and never wait on I/O (a short in-memory lock is fine). Completed
	// records are immutable, so the record may be the store's own: the
	// caller must not modify it.
	Peek(prefix, id string) *Record
}

// InProcess is implemented by stores whose every call completes in process
// memory, never waiting on I/O or on another process (memstore): the
// receiver then spends no timer bounding their calls with
// Config.StoreTimeout.
type InProcess interface {
	// InProcess reports whether every call completes in process memory.
	InProcess() bool
}

// Bounded is implemented by stores that bound every call themselves,
// whatever the context they are given: a call returns (with
// ErrUnavailable at worst) within CallTimeout, retries included
// (redisstore's and pgstore's Options.Timeout). When that is within
// Config.StoreTimeout, the receiver spends no timer of its own bounding
// the completions and releases it runs detached from the caller.
type Bounded interface {
	// CallTimeout is how long a call may take at most; 0 when the store
	// cannot say (a wrapper over a store that is not Bounded).
	CallTimeout() time.Duration
}

// SplitKey cuts key after its first ':' into the prefix (namespace and
// colon) and the id; a key without a colon has an empty prefix. The parts
// share key's memory. Stores that implement Peeker use it to index records
// the way the receiver looks them up.
func SplitKey(key string) (prefix, id string) {
	i := strings.IndexByte(key, ':')
	return key[:i+1], key[i+1:]
}

// BatchStore is an optional ability of stores that can run many operations
// in one round trip. Each item's outcome must equal what the single-key
// method would have returned for it, and a result slice always has one
// entry per request.
type BatchStore interface {
	Store
	// AcquireBatch runs Acquire for every request; the outcome at index i
	// belongs to reqs[i]. A key repeated in reqs is claimed by its first
	// request only. A cancelled context fails every request with its error.
	AcquireBatch(ctx context.Context, reqs []AcquireRequest) []AcquireOutcome
	// CompleteBatch runs Complete for every request; the error at index i
	// belongs to reqs[i] and is nil on success.
	CompleteBatch(ctx context.Context, reqs []CompleteRequest) []error
	// ExtendBatch runs Extend for every request; the error at index i
	// belongs to reqs[i] and is nil on success. A batch's heartbeat extends
	// all of its claims with it in one round trip.
	ExtendBatch(ctx context.Context, reqs []ExtendRequest) []error
}

// Inspector is an optional ability of stores whose records can be listed
// and removed by an operator (Receiver.Forget, before a dead-lettered
// message is redriven; and an operator's own tooling). Tools should remove
// with DeleteIf, which never pulls a key from under a live holder; Delete
// removes whatever it finds.
type Inspector interface {
	// Get returns the record for key, or an error matching ErrNotFound.
	Get(ctx context.Context, key string) (Record, error)
	// Delete removes the record for key, whatever its state: a later
	// Acquire claims it afresh, and the holder of a deleted claim gets
	// ErrLeaseLost. Deleting an absent key is not an error.
	Delete(ctx context.Context, key string) error
	// DeleteIf removes the record of req.Key only when req allows its
	// state (see DeleteRequest): in the states req.States names (completed
	// or failed when empty), or processing under a lease that has ended
	// when req.ExpiredLease is set. Reading the record and deleting it are
	// one atomic step: a claim made after the record was read is never
	// deleted. It returns whether it deleted the record, and the record as
	// it found it, deleted or not, so that a caller can say why a record
	// stayed (a processing record under a live lease: someone holds the
	// key). A refusal is not an error. An absent key (or an expired
	// completed or failed record) is an error matching ErrNotFound.
	DeleteIf(ctx context.Context, req DeleteRequest) (deleted bool, rec Record, err error)
	// Scan yields every unexpired record whose key starts with prefix, until
	// the caller stops or the scan ends. A failure is yielded once, as a
	// zero Record with the error, and ends the scan.
	Scan(ctx context.Context, prefix string) iter.Seq2[Record, error]
}
