package dedup

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dedup-go/dedup/store"
)

// claimKey is the context key of the claim a handler holds.
var claimKey = store.ClaimContextKey()

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
// It takes no lock: returned is set once, child is installed once, and
// whoever sets one of them reads the other after, so that a cancellable
// part made while the handler returns is cancelled by one side or the
// other.
type handlerContext struct {
	parent   context.Context
	held     store.HeldClaim
	returned atomic.Bool                // the handler returned
	child    atomic.Pointer[cancelPart] // the cancellable part, once made
}

// cancelPart is the cancellable part of a handler's context.
type cancelPart struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

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
	if p := c.child.Load(); p != nil {
		return p.ctx.Done()
	}
	if c.returned.Load() {
		return closedChan
	}
	return c.made().ctx.Done()
}

// Err returns nil until the context ends, then why (context.Canceled for
// a lost lease or a returned handler, as the standard library's do).
func (c *handlerContext) Err() error {
	if p := c.child.Load(); p != nil {
		return p.ctx.Err()
	}
	if c.returned.Load() {
		return context.Canceled
	}
	return c.parent.Err()
}

// Value answers the claim itself and asks the rest of the chain for any
// other key: the cancellable part once made (the standard library finds
// it there to link derived contexts and to read a cause), else the
// caller's context.
func (c *handlerContext) Value(key any) any {
	if key == claimKey {
		return &c.held
	}
	if p := c.child.Load(); p != nil {
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
	if p := c.child.Load(); p != nil {
		return p
	}
	ctx, cancel := context.WithCancelCause(c.parent)
	p := &cancelPart{ctx: ctx, cancel: cancel}
	if !c.child.CompareAndSwap(nil, p) {
		cancel(nil) // made by another call first: the parent forgets this one
		return c.child.Load()
	}
	if c.returned.Load() {
		p.cancel(nil)
	}
	return p
}

// end ends the context once the handler returned, with context.Canceled
// unless it ended already.
func (c *handlerContext) end() {
	if !c.returned.CompareAndSwap(false, true) {
		return
	}
	if p := c.child.Load(); p != nil {
		p.cancel(nil)
	}
}

// lose cancels the context with ErrLeaseLost as its cause (which reaches
// context.Cause, so the cancellable part is made for it), unless the
// handler returned already.
func (c *handlerContext) lose() {
	if c.returned.Load() {
		return
	}
	c.made().cancel(ErrLeaseLost)
}
