package store

import "time"

// AcquireRequest asks for a claim on Key.
type AcquireRequest struct {
	// Key is the record's key. It must not be empty.
	Key string
	// Lease is how long the claim holds the key before another Acquire may
	// take it over. It must be positive.
	Lease time.Duration
	// Fingerprint identifies the payload. When both the request and the
	// stored record have one and they differ, Acquire returns ErrKeyReused
	// and claims nothing. Empty means "do not check".
	Fingerprint string
}

// AcquireOutcome is the answer to one request of AcquireBatch.
type AcquireOutcome struct {
	Claim Claim
	Err   error
}

// CompleteRequest completes the record of Key held by Token.
type CompleteRequest struct {
	Key   string
	Token Token
	// Result is kept with the record and replayed to duplicates; nil or
	// empty is a result too (none). The store copies it.
	Result []byte
	// Retention is how long the completed record is kept. It must be
	// positive.
	Retention time.Duration
}

// ReleaseRequest gives up the claim on Key held by Token after a failure.
type ReleaseRequest struct {
	Key   string
	Token Token
	// Error is the failure's text, kept with the record as LastError.
	Error string
	// Retention is how long the failed record (and its attempt count) is
	// kept. It must be positive.
	Retention time.Duration
}

// ExtendRequest sets the lease of Key held by Token to Lease from now.
type ExtendRequest struct {
	Key   string
	Token Token
	// Lease must be positive.
	Lease time.Duration
}
