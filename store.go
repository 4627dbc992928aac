package dedup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"time"
)

// Store keeps one record per key and moves it through the state machine of
// the package documentation. Every method is one atomic step on one key.
//
// Keys are non-empty strings chosen by the Receiver (namespace, a colon, and
// the message id); a store must not interpret them. Results are opaque bytes.
// Implementations must be safe for concurrent use, and should pass
// [github.com/dedup-go/dedup/store/storetest.Run].
//
// Errors: Complete, Release and Extend return an error matching
// [ErrLeaseLost] when token no longer holds the key; Acquire returns an
// error matching [ErrKeyReused] on a fingerprint mismatch; an empty key is
// [ErrInvalidKey] and a non-positive lease or retention [ErrInvalidConfig],
// and such a refused call changes nothing; a cancelled context is returned
// as the context's error. Any other error (an unreachable backend) is what
// the receiver's fail-open or fail-closed policy applies to; stores should
// make it match [ErrStoreUnavailable].
//
// Rules that every store keeps, beyond the state machine:
//   - A token holds its key until another Acquire takes the key over. After
//     its lease deadline and before a takeover, Complete, Release and Extend
//     may succeed (memstore) or report ErrLeaseLost (a store whose expired
//     records vanish); either way the outcome is consistent.
//   - A processing record whose lease expired may be forgotten by the store
//     (its attempt count with it); completed and failed records are kept
//     for their retention unless a bounded store evicts them and counts it.
//   - The fingerprint stored is the first non-empty one of a claim that
//     acquired the key.
//   - Record.Result returned by any method may be shared with the store and
//     must be treated as read-only; Complete copies the bytes it is given.
type Store interface {
	// Acquire claims key for the caller if it is absent, failed, or
	// processing under an expired lease, and reports the record holding it
	// otherwise. Check and claim are one atomic step.
	Acquire(ctx context.Context, key string, req AcquireRequest) (Claim, error)

	// Complete stores result for the key held by token and keeps it, immutable,
	// for retention.
	Complete(ctx context.Context, key string, token Token, result []byte, retention time.Duration) error

	// Release gives up the key held by token and records the failure, so the
	// next Acquire may try again. The failed record is kept for
	// failure.Retention, remembering the attempt count.
	Release(ctx context.Context, key string, token Token, failure Failure) error

	// Extend pushes the lease of the key held by token to lease from now.
	Extend(ctx context.Context, key string, token Token, lease time.Duration) error
}

// Peeker is an optional ability of stores that can answer for a completed
// record from process memory, without I/O (memstore, the local tier of
// tieredstore). The receiver asks it before anything else, so a duplicate of
// a completed message costs no round trip and no allocation.
//
// The key comes in two parts, as [SplitKey] cuts it: prefix is the key up to
// and including its first ':' (the receiver's namespace), id the rest. The
// receiver never has to join them for a duplicate, and a store may keep
// its records under the two parts. A store may answer false for a key cut
// any other way; it must never answer with another key's record.
type Peeker interface {
	// Peek returns the completed record held for prefix+id in memory, or
	// nil. It must never return a record that is not completed or expired,
	// and never wait on I/O (a short in-memory lock is fine). Completed
	// records are immutable, so the record may be the store's own: the
	// caller must not modify it.
	Peek(prefix, id string) *Record
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
// method would have returned for it.
type BatchStore interface {
	Store
	// AcquireBatch runs Acquire for every item; the outcome at index i
	// belongs to items[i]. A key repeated in items is claimed by its first
	// item only. A cancelled context fails every item with its error.
	AcquireBatch(ctx context.Context, items []AcquireItem) []AcquireOutcome
	// CompleteBatch runs Complete for every item; the error at index i
	// belongs to items[i] and is nil on success.
	CompleteBatch(ctx context.Context, items []CompleteItem) []error
}

// Inspector is an optional ability of stores whose records can be listed
// and removed by an operator (what dedupctl uses).
type Inspector interface {
	// Get returns the record for key, or an error matching ErrNotFound.
	Get(ctx context.Context, key string) (Record, error)
	// Delete removes the record for key, whatever its state. Deleting an
	// absent key is not an error.
	Delete(ctx context.Context, key string) error
	// Scan calls fn for every record whose key starts with prefix until fn
	// returns false or the scan ends.
	Scan(ctx context.Context, prefix string, fn func(Record) bool) error
}

// AcquireRequest describes a claim.
type AcquireRequest struct {
	// Lease is how long the claim holds the key before another Acquire may
	// take it over. It must be positive.
	Lease time.Duration
	// Fingerprint identifies the payload. When both the request and the
	// stored record have one and they differ, Acquire returns ErrKeyReused
	// and claims nothing. Empty means "do not check".
	Fingerprint string
}

// AcquireItem is one key of AcquireBatch.
type AcquireItem struct {
	Key     string
	Request AcquireRequest
}

// AcquireOutcome is the result of one item of AcquireBatch.
type AcquireOutcome struct {
	Claim Claim
	Err   error
}

// CompleteItem is one key of CompleteBatch.
type CompleteItem struct {
	Key       string
	Token     Token
	Result    []byte
	Retention time.Duration
}

// Failure describes why a claim was released.
type Failure struct {
	// Error is the handler's error text, kept with the record.
	Error string
	// Retention is how long the failed record (and its attempt count) is kept.
	// It must be positive.
	Retention time.Duration
}

// Claim is the answer of Acquire.
type Claim struct {
	// Acquired reports whether the caller now holds the key with Token.
	// When false, Record is the record that holds it (processing under an
	// unexpired lease, or completed).
	Acquired bool
	// Token fences the claim: Complete, Release and Extend succeed only with
	// it. Zero when not acquired.
	Token Token
	// Record is the record after the call: for an acquired claim, the new
	// processing record (its Attempt counts this claim).
	Record Record
}

// State is the state of a record.
type State uint8

// The states of a record; an absent key has no record.
const (
	StateProcessing State = iota + 1
	StateCompleted
	StateFailed
)

// String returns the state's name.
func (s State) String() string {
	switch s {
	case StateProcessing:
		return "processing"
	case StateCompleted:
		return "completed"
	case StateFailed:
		return "failed"
	default:
		return "unknown"
	}
}

// Record is what a store keeps for one key.
type Record struct {
	Key   string
	State State
	// Attempt counts the claims of the key: 1 for the first.
	Attempt int
	// Fingerprint of the payload that made the first claim, if any.
	Fingerprint string
	// Result of the completed handler, as encoded by the receiver's codec.
	Result []byte
	// LastError is the error text of the last failed attempt.
	LastError string
	// LeaseUntil is when the processing claim expires.
	LeaseUntil time.Time
	// ExpiresAt is when a completed or failed record is forgotten.
	ExpiresAt time.Time
}

// Token fences a claim: a fresh random value for every Acquire.
type Token [16]byte

// NewToken returns a fresh random token.
func NewToken() Token {
	var t Token
	_, _ = rand.Read(t[:]) // crypto/rand.Read never fails on supported platforms.
	return t
}

// IsZero reports whether t is the zero token (no claim).
func (t Token) IsZero() bool { return t == Token{} }

// String returns t in hexadecimal.
func (t Token) String() string { return hex.EncodeToString(t[:]) }
