package store

import (
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"time"
)

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
	// LastError is the error text of the last failed attempt; a completed
	// record keeps the one before its success.
	LastError string
	// LeaseUntil is when the processing claim expires.
	LeaseUntil time.Time
	// ExpiresAt is when a completed or failed record is forgotten.
	ExpiresAt time.Time
	// Token is the token of the record's last claim: the holder's while
	// processing, the one that completed or released it once settled. It
	// is there for an operator to match a record with its holder's logs
	// (what an Inspector reads); a store may leave it zero in the answers
	// of Acquire and Peek, and holding it grants nothing the Claim's Token
	// does not. The stores of this module leave a live holder's token out
	// of the answer to an Acquire that it refused.
	Token Token
	// CreatedAt is when the key's first claim was made, by the clock that
	// stamps the store's leases. Zero from a store that does not keep it
	// (a record written by an earlier version of the store).
	CreatedAt time.Time
	// CompletedAt is when a completed record completed, or when a failed
	// record's last attempt failed, by the clock that stamps its
	// ExpiresAt; zero while processing. A copy of a record kept apart from
	// its store (tieredstore's local tier, answering Peek and Acquire) may
	// leave it zero; an Inspector's answers carry it.
	CompletedAt time.Time
	// Steps are the record's step records (StepStore), in no particular
	// order: an Inspector's Get and Scan fill them in; Acquire and Peek
	// leave them out.
	Steps []StepRecord
}

// Token fences a claim: a fresh random value for every Acquire.
type Token [16]byte

// NewToken returns a fresh random token: 128 bits from math/rand/v2's
// generator (ChaCha8, seeded from the operating system's entropy), so that
// among four billion claims two tokens are equal with a chance below
// 2^-64. A token fences claims against each other and is no secret (whoever
// reads the store reads it), so it does without crypto/rand, which cost a
// token about 70 ns more (docs/performance.md).
func NewToken() Token {
	var t Token
	binary.LittleEndian.PutUint64(t[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(t[8:], rand.Uint64())
	return t
}

// IsZero reports whether t is the zero token (no claim).
func (t Token) IsZero() bool { return t == Token{} }

// String returns t in hexadecimal.
func (t Token) String() string { return hex.EncodeToString(t[:]) }
