package rediscore

import (
	"errors"
	"fmt"
	"time"

	"github.com/dedup-go/dedup/store"
)

// CheckAcquire checks the arguments of Acquire.
func (c *Core) CheckAcquire(req store.AcquireRequest) error {
	if req.Key == "" {
		return c.EmptyKey("acquire")
	}
	if req.Lease <= 0 {
		return fmt.Errorf("%s: acquire %q: %w: the lease is %v, it must be positive", c.Pkg, req.Key, store.ErrInvalidConfig, req.Lease)
	}
	return nil
}

// CheckSettle checks the arguments of Complete and Release. A zero token
// never holds a key, so it gets ErrLeaseLost without a round trip.
func (c *Core) CheckSettle(op, key string, token store.Token, retention time.Duration) error {
	if key == "" {
		return c.EmptyKey(op)
	}
	if retention <= 0 {
		return fmt.Errorf("%s: %s %q: %w: the retention is %v, it must be positive", c.Pkg, op, key, store.ErrInvalidConfig, retention)
	}
	if token.IsZero() {
		return c.LeaseLost(op, key)
	}
	return nil
}

// CheckExtend checks the arguments of Extend.
func (c *Core) CheckExtend(req store.ExtendRequest) error {
	if req.Key == "" {
		return c.EmptyKey("extend")
	}
	if req.Lease <= 0 {
		return fmt.Errorf("%s: extend %q: %w: the lease is %v, it must be positive", c.Pkg, req.Key, store.ErrInvalidConfig, req.Lease)
	}
	if req.Token.IsZero() {
		return c.LeaseLost("extend", req.Key)
	}
	return nil
}

// Settled reads the answer of the scripts that settle or extend a claim
// (ReleaseScript, ExtendScript): 1 done, 0 the token does not hold the
// key. A reply that is not an integer is the caller's to report (Reply).
func (c *Core) Settled(op, key string, code int64) error {
	switch code {
	case 1:
		return nil
	case 0:
		return c.LeaseLost(op, key)
	}
	return c.Reply(op, key, code)
}

// Completed reads the answer of the completion scripts: 1 this call wrote
// the record, 2 the token had completed it already (nothing changed), 0
// the token does not hold the key. A reply that is not an integer is the
// caller's to report (Reply).
func (c *Core) Completed(key string, code int64) (store.Completion, error) {
	switch code {
	case 1:
		return store.CompletionWrote, nil
	case 2:
		return store.CompletionUnchanged, nil
	case 0:
		return store.CompletionUnknown, c.LeaseLost("complete", key)
	}
	return store.CompletionUnknown, c.Reply("complete", key, code)
}

// Deleted reads the answer of DeleteIfScript: found is false for {} (no
// record); else code 1 deleted, 0 kept, and v the record as it was.
func (c *Core) Deleted(key string, found bool, code int64, v string) (bool, store.Record, error) {
	if !found {
		return false, store.Record{}, c.NotFound("delete", key)
	}
	rec, err := Unpack(key, v)
	if err != nil {
		return false, store.Record{}, c.Unavailable("delete", key, err)
	}
	return code == 1, rec, nil
}

// Reused is the error of an Acquire that found a record of another
// fingerprint.
func (c *Core) Reused(key string, state store.State) error {
	return fmt.Errorf("%s: acquire %q: %w: the %s record has another fingerprint", c.Pkg, key, store.ErrKeyReused, state)
}

// Context is the error of a call whose context ended: the context's
// error, not a store failure.
func (c *Core) Context(op, key string, err error) error {
	return fmt.Errorf("%s: %s %q: %w", c.Pkg, op, key, err)
}

// LeaseLost is the error of a call whose token does not hold the key.
func (c *Core) LeaseLost(op, key string) error {
	return fmt.Errorf("%s: %s %q: %w", c.Pkg, op, key, store.ErrLeaseLost)
}

// EmptyKey is the error of a call with an empty key.
func (c *Core) EmptyKey(op string) error {
	return fmt.Errorf("%s: %s: %w: the key is empty", c.Pkg, op, store.ErrInvalidKey)
}

// NotFound is the error of an Inspector's call on an absent key.
func (c *Core) NotFound(op, key string) error {
	return fmt.Errorf("%s: %s %q: %w", c.Pkg, op, key, store.ErrNotFound)
}

// Unavailable wraps err, a failure of Redis or of its answer, in a
// *store.OpError, which matches store.ErrUnavailable.
func (c *Core) Unavailable(op, key string, err error) error {
	return &store.OpError{Op: op, Key: key, Err: fmt.Errorf("%s: %w", c.Pkg, err)}
}

// Reply reports a reply no script of this package gives: a key that
// another program wrote, or a server that is not Redis.
func (c *Core) Reply(op, key string, reply any) error {
	return &store.OpError{Op: op, Key: key, Err: fmt.Errorf("%s: unexpected reply %v", c.Pkg, reply)}
}

// IsNotRecord reports whether err says a value is not a record of this
// package (another program's key under the prefix).
func IsNotRecord(err error) bool { return errors.Is(err, errNotRecord) }
