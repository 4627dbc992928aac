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
	// Token, when not zero, is the token the claim is made with: chosen by
	// the caller (NewToken) and kept across the retries of one delivery,
	// so that an Acquire whose answer was lost after the store wrote it (a
	// timeout, a connection reset, a failover) can be asked again and
	// recognise its own claim. An Acquire that finds the key processing
	// under this very token, its lease live or ended, is granted again as
	// the same claim: the attempt count stays, and the lease runs
	// req.Lease from now. A claim held under any other token is refused
	// (or taken over once its lease ended) as usual. A fingerprint
	// mismatch is still ErrKeyReused. Zero means the store draws a fresh
	// token for every Acquire. A token names one claim: send it again only
	// to ask for the claim it was first sent for, never once that claim
	// was completed or released (a store may then count it as a new
	// claim, and a cache in front of it, tieredstore, would not know),
	// and never from two callers at once.
	Token Token
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

// DeleteRequest asks an Inspector to delete the record of Key only when
// nothing may still be working under it: see Inspector.DeleteIf.
type DeleteRequest struct {
	// Key is the record's key. It must not be empty.
	Key string
	// States are the states in which the record is deleted. Empty means
	// StateCompleted and StateFailed: the records no one holds.
	// StateProcessing here deletes a claim whatever its lease, pulling the
	// key from under a live holder: leave it out and set ExpiredLease
	// instead, unless that is what you mean.
	States []State
	// ExpiredLease also deletes a processing record whose lease has ended
	// (on the clock the store measures leases by), which no holder can
	// complete any more once another Acquire takes it over.
	ExpiredLease bool
}

// Allows reports whether req deletes rec, a record read at now: its state
// is one of req.States (completed or failed when States is empty), or it
// is processing, req.ExpiredLease is set and its lease ended by now (now
// is not before LeaseUntil). Stores that decide in process memory call
// it; the others decide the same in their own language.
func (req DeleteRequest) Allows(rec Record, now time.Time) bool {
	if len(req.States) == 0 {
		if rec.State == StateCompleted || rec.State == StateFailed {
			return true
		}
	} else {
		for _, s := range req.States {
			if s == rec.State {
				return true
			}
		}
	}
	return req.ExpiredLease && rec.State == StateProcessing && !now.Before(rec.LeaseUntil)
}
