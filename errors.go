package dedup

import (
	"errors"
	"fmt"
)

// Sentinel errors. Match them with errors.Is; errors returned by this module
// wrap them with context.
var (
	// ErrNoKey: the message carries no id (the key strategy found nothing).
	// Such a message is poison: adapters dead-letter it.
	ErrNoKey = errors.New("dedup: message has no id")
	// ErrInvalidKey: the id is unusable (too long, invalid UTF-8, ...).
	ErrInvalidKey = errors.New("dedup: invalid message id")
	// ErrKeyReused: the key was first seen with another payload fingerprint.
	ErrKeyReused = errors.New("dedup: key reused with a different payload")
	// ErrStoreUnavailable: the store could not be reached or failed.
	ErrStoreUnavailable = errors.New("dedup: store unavailable")
	// ErrLeaseLost: the claim's token no longer holds the key (the lease
	// expired and another delivery took over); the result was not stored.
	ErrLeaseLost = errors.New("dedup: lease lost")
	// ErrAttemptsExhausted: the key failed MaxAttempts times.
	ErrAttemptsExhausted = errors.New("dedup: attempts exhausted")
	// ErrResultNotStored: the handler succeeded but its result could not be
	// encoded or was over the size limit; the record was completed without
	// it, so duplicates are still answered, with the zero value.
	ErrResultNotStored = errors.New("dedup: result not stored")
	// ErrUndecodable: an adapter could not decode the message body. Such a
	// message is poison: adapters dead-letter it.
	ErrUndecodable = errors.New("dedup: undecodable message")
	// ErrNotFound: an Inspector has no record for the key.
	ErrNotFound = errors.New("dedup: record not found")
	// ErrInvalidConfig: a Config field, option or store argument (a lease or
	// retention) is out of range.
	ErrInvalidConfig = errors.New("dedup: invalid config")
)

// HandlerError is the handler's error (or panic), with the attempt it ended.
type HandlerError struct {
	Key     string
	Attempt int
	Err     error
}

// Error describes the failure with the key and attempt.
func (e *HandlerError) Error() string {
	return fmt.Sprintf("dedup: handler failed for %q (attempt %d): %v", e.Key, e.Attempt, e.Err)
}

// Unwrap returns the handler's error.
func (e *HandlerError) Unwrap() error { return e.Err }

// PanicError is a recovered handler panic, with the panicking goroutine's stack.
type PanicError struct {
	Value any
	Stack []byte
}

// Error gives the panic value and the stack.
func (e *PanicError) Error() string {
	return fmt.Sprintf("dedup: handler panicked: %v\n%s", e.Value, e.Stack)
}

// StoreError is a failed store call. It matches ErrStoreUnavailable.
type StoreError struct {
	Op  string // "acquire", "complete", "release", "extend"
	Key string
	Err error
}

// Error names the failed operation and key.
func (e *StoreError) Error() string {
	return fmt.Sprintf("dedup: store %s %q: %v", e.Op, e.Key, e.Err)
}

// Unwrap returns the store's own error.
func (e *StoreError) Unwrap() error { return e.Err }

// Is makes every StoreError match ErrStoreUnavailable.
func (e *StoreError) Is(target error) bool { return target == ErrStoreUnavailable }

// storeError returns err as a *StoreError of op on key: err itself when the
// store already returned one, so that its message does not repeat.
func storeError(op, key string, err error) *StoreError {
	var serr *StoreError
	if errors.As(err, &serr) && serr.Op == op && serr.Key == key {
		return serr
	}
	return &StoreError{Op: op, Key: key, Err: err}
}

// permanentError marks an error as not worth retrying.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as permanent: the message is dead-lettered at once
// instead of retried. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or an error it wraps, was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
