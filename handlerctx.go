package dedup

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dedup-go/dedup/store"
)

// claimKey is the context key of the claim a handler holds.
var claimKey = learnClaimKey()

// learnClaimKey asks store.ClaimFromContext which key it looks the claim
// up by, so that package store need export no key: the handler's context,
// a type of its own made without an allocation of its own, answers Value
// for it with the claim it holds.
func learnClaimKey() any {
	var spy keySpy
	store.ClaimFromContext(&spy)
	return spy.key
}

// keySpy is a context that records the key it was asked for.
type keySpy struct {
	context.Context
	key any
}

func (s *keySpy) Value(key any) any {
	s.key = key
	return nil
}

// closedChan is the Done channel of a handler context that ended before
// anyone asked for one.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// handlerContext is the context a handler runs under: the caller's, with
// the claim the handler holds as a value, cancelled when the caller's is,
// when the lease is lost (cause ErrLeaseLost) and when the handler
// returns.
//
// It holds the claim itself, and is the one allocation of a delivery that
// runs its handler: a handler may keep its context, and the claim in it,
// after it returns, so neither is ever recycled. Its cancellable part, a
// context.WithCancelCause of the caller's context, is made only when
// somebody needs it: a handler that asks for Done (to select on it, or to
// derive a context of its own, which the standard library then links to
// it without a goroutine), or a lease lost while the handler runs. A
// handler that never waits on its context costs no allocation for it.
//
// It takes no lock: its state is one pointer, swapped atomically from
// nil (running, nothing made) to the cancellable part once made, or to
// returnedMark when the handler returns first.
type handlerContext struct {
	parent context.Context
	held   store.HeldClaim
	child  atomic.Pointer[cancelPart]
	handlerSteps
}

// cancelPart is the cancellable part of a handler's context.
type cancelPart struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// returnedMark is the state of a handler's context whose handler returned
// before anything made its cancellable part.
var returnedMark = new(cancelPart)

// init readies c, which is zero, for a handler of parent holding the
// claim of key by token.
func (c *handlerContext) init(parent context.Context, key string, token store.Token, attempt int, retention time.Duration) {
	c.parent = parent
	c.held = store.HeldClaim{Key: key, Token: token, Attempt: attempt, Retention: retention}
}

// Deadline is the caller's: the receiver sets none of its own.
func (c *handlerContext) Deadline() (time.Time, bool) { return c.parent.Deadline() }

// Done returns a channel closed when the context ends.
func (c *handlerContext) Done() <-chan struct{} {
	switch p := c.child.Load(); p {
	case returnedMark:
		return closedChan
	case nil:
		return c.made().ctx.Done()
	default:
		return p.ctx.Done()
	}
}

// Err returns nil until the context ends, then why (context.Canceled for
// a lost lease or a returned handler, as the standard library's do).
func (c *handlerContext) Err() error {
	switch p := c.child.Load(); p {
	case returnedMark:
		return context.Canceled
	case nil:
		return c.parent.Err()
	default:
		return p.ctx.Err()
	}
}

// Value answers the claim itself and asks the rest of the chain for any
// other key: the cancellable part once made (the standard library finds
// it there to link derived contexts and to read a cause), else the
// caller's context.
func (c *handlerContext) Value(key any) any {
	if key == claimKey {
		return &c.held
	}
	if key == (stepsKey{}) {
		return c
	}
	if p := c.child.Load(); p != nil && p != returnedMark {
		return p.ctx.Value(key)
	}
	return c.parent.Value(key)
}

// String names the context as the standard library's do.
func (c *handlerContext) String() string {
	return fmt.Sprint(c.parent) + ".WithClaim(" + c.held.Key + ")"
}

// made returns the cancellable part, making it if need be: cancelled at
// once when the handler returned already.
func (c *handlerContext) made() *cancelPart {
	for {
		old := c.child.Load()
		if old != nil && old != returnedMark {
			return old
		}
		ctx, cancel := context.WithCancelCause(c.parent)
		p := &cancelPart{ctx: ctx, cancel: cancel}
		if old == returnedMark {
			cancel(nil)
		}
		if c.child.CompareAndSwap(old, p) {
			return p
		}
		cancel(nil) // the state moved on: the parent forgets this one
	}
}

// end ends the context once the handler returned, with context.Canceled
// unless it ended already.
func (c *handlerContext) end() {
	if c.child.CompareAndSwap(nil, returnedMark) {
		return
	}
	if p := c.child.Load(); p != returnedMark {
		p.cancel(nil)
	}
}

// lose cancels the context with ErrLeaseLost as its cause (which reaches
// context.Cause, so the cancellable part is made for it), unless the
// handler returned already.
func (c *handlerContext) lose() {
	if c.child.Load() == returnedMark {
		return
	}
	c.made().cancel(ErrLeaseLost)
}

// callerDetached returns the caller's context without its cancellation,
// as context.WithoutCancel would, but without an allocation: a view of c,
// which is never recycled, for the completion of its delivery. A caller's
// context that can never be cancelled is returned as it is.
func (c *handlerContext) callerDetached() context.Context {
	if c.parent.Done() == nil {
		return c.parent
	}
	return (*callerValues)(c)
}

// callerValues is a handler's context seen as its caller's, without the
// caller's deadline and cancellation: its values only.
type callerValues handlerContext

// Deadline reports none.
func (c *callerValues) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done returns nil: the context is never cancelled.
func (c *callerValues) Done() <-chan struct{} { return nil }

// Err returns nil.
func (c *callerValues) Err() error { return nil }

// Value asks the caller's context.
func (c *callerValues) Value(key any) any { return c.parent.Value(key) }

// String names the context as context.WithoutCancel's.
func (c *callerValues) String() string { return fmt.Sprint(c.parent) + ".WithoutCancel" }
