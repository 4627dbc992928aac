package dedup

import (
	"errors"
	"fmt"

	"github.com/dedup-go/dedup/store"
)

// Sentinel errors. Match them with errors.Is; errors returned by this module
// wrap them with context. Those a store returns are the values of package
// store (ErrLeaseLost == store.ErrLeaseLost), so either name matches.
var (
	// ErrNoKey: the message carries no id (the key strategy found nothing).
	// Such a message is poison: adapters dead-letter it.
	ErrNoKey = errors.New("dedup: message has no id")
	// ErrInvalidKey: the id is unusable (too long, invalid UTF-8, ...).
	ErrInvalidKey = store.ErrInvalidKey
	// ErrKeyReused: the key was first seen with another payload fingerprint.
	ErrKeyReused = store.ErrKeyReused
	// ErrStoreUnavailable: the store could not be reached or failed.
	ErrStoreUnavailable = store.ErrUnavailable
	// ErrLeaseLost: the claim's token no longer holds the key (the lease
	// expired and another delivery took over); the result was not stored.
	ErrLeaseLost = store.ErrLeaseLost
	// ErrAttemptsExhausted: the key failed MaxAttempts times.
	ErrAttemptsExhausted = errors.New("dedup: attempts exhausted")
	// ErrResultNotStored: the handler succeeded but its result could not be
	// encoded, was over the size limit, or its completion could not be
	// stored. It is reported in Result.Problem, never as Handle's error:
	// the effect happened.
	ErrResultNotStored = errors.New("dedup: result not stored")
	// ErrResultUndecodable: a stored result could not be decoded for a
	// duplicate. It is reported in Result.Problem of the duplicate, whose
	// Value is then the zero value.
	ErrResultUndecodable = errors.New("dedup: stored result undecodable")
	// ErrUndecodable: an adapter could not decode the message body. Such a
	// message is poison: adapters dead-letter it.
	ErrUndecodable = errors.New("dedup: undecodable message")
	// ErrCanceled: the caller's context ended (a shutdown) before the
	// delivery was done. Nothing was recorded as done; Decide retries it.
	ErrCanceled = errors.New("dedup: delivery canceled")
	// ErrNotFound: the store has no record for the key.
	ErrNotFound = store.ErrNotFound
	// ErrInvalidConfig: a Config field, option or argument is out of range.
	ErrInvalidConfig = store.ErrInvalidConfig
	// ErrNotSupported: the store lacks an optional ability the call needs
	// (Forget needs a store.Inspector).
	ErrNotSupported = errors.New("dedup: not supported by the store")
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

// PanicError is a recovered panic of user code (handler, key func, codec,
// Fingerprint, Heartbeat, Backoff), with the panicking goroutine's stack.
type PanicError struct {
	// Func names the user code that panicked: "handler", "key func", ...
	Func  string
	Value any
	Stack []byte
}

// Error gives the panic value and the stack.
func (e *PanicError) Error() string {
	return fmt.Sprintf("dedup: %s panicked: %v\n%s", e.Func, e.Value, e.Stack)
}

// storeError returns err as a *store.OpError of op on key: err itself when
// the store already returned one, so that its message does not repeat.
func storeError(op, key string, err error) error {
	var serr *store.OpError
	if errors.As(err, &serr) {
		return err
	}
	return &store.OpError{Op: op, Key: key, Err: err}
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
