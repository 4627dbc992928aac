package dedup

import (
	"cmp"
	"context"
	"fmt"
	"sync"
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
type handlerContext struct {
	parent context.Context
	held   store.HeldClaim

	mu     sync.Mutex
	child  context.Context // the cancellable part, once made
	cancel context.CancelCauseFunc
	ended  error // why it ended, when it ended before child was made
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
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.child == nil && c.ended != nil {
		return closedChan
	}
	return c.made().Done()
}

// Err returns nil until the context ends, then why (context.Canceled for
// a lost lease or a returned handler, as the standard library's do).
func (c *handlerContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.child != nil:
		return c.child.Err()
	case c.ended != nil:
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
	c.mu.Lock()
	child := c.child
	c.mu.Unlock()
	if child != nil {
		return child.Value(key)
	}
	return c.parent.Value(key)
}

// String names the context as the standard library's do, without reading
// its fields unlocked.
func (c *handlerContext) String() string {
	return fmt.Sprint(c.parent) + ".WithClaim(" + c.held.Key + ")"
}

// made returns the cancellable part, making it if need be. Under c.mu.
func (c *handlerContext) made() context.Context {
	if c.child == nil {
		c.child, c.cancel = context.WithCancelCause(c.parent)
		if c.ended != nil {
			c.cancel(c.ended)
		}
	}
	return c.child
}

// end cancels the context with cause: ErrLeaseLost (the cause then reaches
// context.Cause, so the cancellable part is made for it), or nil when the
// handler returned. Only the first call counts.
func (c *handlerContext) end(cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended != nil {
		return
	}
	c.ended = cmp.Or(cause, context.Canceled)
	switch {
	case c.child != nil:
		c.cancel(cause)
	case cause != nil:
		c.made() // cancelled with c.ended as it is made
	}
}
