package store

import (
	"errors"
	"fmt"
)

// Errors of the contract. The root package dedup exports the same values
// (dedup.ErrLeaseLost == store.ErrLeaseLost), so callers match either with
// errors.Is.
var (
	// ErrUnavailable: the store could not be reached or failed. Every error
	// a store returns for a failing backend should match it.
	ErrUnavailable = errors.New("dedup: store unavailable")
	// ErrLeaseLost: the token no longer holds the key (the lease expired and
	// another delivery took over, or the record was deleted).
	ErrLeaseLost = errors.New("dedup: lease lost")
	// ErrKeyReused: the key was first seen with another payload fingerprint.
	ErrKeyReused = errors.New("dedup: key reused with a different payload")
	// ErrInvalidKey: the key (or the message id it holds) is unusable:
	// empty, too long, not valid UTF-8.
	ErrInvalidKey = errors.New("dedup: invalid message id")
	// ErrInvalidConfig: a configuration value or request argument (a lease
	// or retention) is out of range.
	ErrInvalidConfig = errors.New("dedup: invalid config")
	// ErrNotFound: an Inspector has no record for the key.
	ErrNotFound = errors.New("dedup: record not found")
)

// OpError is a store call that failed for a reason other than the
// contract's (an unreachable server, a timeout, an answer that makes no
// sense). It matches ErrUnavailable.
type OpError struct {
	Op  string // "acquire", "complete", "release", "extend", ...
	Key string
	Err error
}

// Error names the failed operation and key.
func (e *OpError) Error() string {
	return fmt.Sprintf("dedup: store %s %q: %v", e.Op, e.Key, e.Err)
}

// Unwrap returns the underlying error.
func (e *OpError) Unwrap() error { return e.Err }

// Is makes every OpError match ErrUnavailable.
func (e *OpError) Is(target error) bool { return target == ErrUnavailable }
