package rediscore

import (
	"context"
	"sync/atomic"
	"time"
)

// Every call of a store is bounded by its Options.Timeout. A context.WithTimeout per call
// costs four allocations and a runtime timer set and stopped, which on the
// path of a new message (two calls) was about a tenth of the client's
// allocations; yet most calls come with a context that no one can cancel:
// the receiver completes and releases on a context detached from the
// caller's (context.WithoutCancel), and a consumer's loop often passes
// context.Background. Those calls share a deadline instead: one context
// with a deadline, made once per slack and used by every call that starts
// before the next one is made, so that each is bounded by at most
// Timeout and at least Timeout minus the slack. A call
// whose context can be cancelled, or has a deadline of its own, gets a
// context.WithTimeout of it, or uses it as it is when its deadline comes
// first.

// slackShare is the part of Timeout by which a shared deadline may
// cut a call short: the deadline is renewed every Timeout/slackShare.
const slackShare = 8

// Deadlines bounds a store's calls by its Timeout, handing out the shared
// deadline of the calls whose context cannot be cancelled. Its zero value
// with Timeout set is ready.
type Deadlines struct {
	Timeout time.Duration
	cur     atomic.Pointer[deadline]
}

// deadline is a context that ends at made + timeout. Its cancel function
// is never called: the context ends by its timer, at its deadline, after
// every call that used it.
type deadline struct {
	context.Context
	cancel context.CancelFunc
	made   time.Time
}

// at returns a context that ends between timeout minus its slack and
// timeout after now.
func (d *Deadlines) at(now time.Time) context.Context {
	if cur := d.cur.Load(); cur != nil {
		if age := now.Sub(cur.made); age >= 0 && age < d.Timeout/slackShare {
			return cur.Context
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(d.Timeout))
	d.cur.Store(&deadline{Context: ctx, cancel: cancel, made: now})
	return ctx
}

// Bounded is the context of a call whose caller's context cannot be
// cancelled: the shared deadline, and the caller's values (a tracing
// span, which a hook on the client reads).
type Bounded struct {
	context.Context
	values context.Context
}

// Value returns the caller's value for key.
func (b *Bounded) Value(key any) any { return b.values.Value(key) }

// noCancel is the cancel function of a context that needs none.
func noCancel() {}

// Bound returns ctx bounded by Timeout from now, and the function to call
// when the call is done. b, which the caller allocated with the rest of
// its call, holds the context returned when ctx cannot be cancelled, so
// that such a call allocates nothing here.
func (d *Deadlines) Bound(ctx context.Context, now time.Time, b *Bounded) (context.Context, context.CancelFunc) {
	if end, ok := ctx.Deadline(); ok {
		if end.Sub(now) <= d.Timeout {
			return ctx, noCancel
		}
		return context.WithTimeout(ctx, d.Timeout)
	}
	if ctx.Done() != nil {
		return context.WithTimeout(ctx, d.Timeout)
	}
	*b = Bounded{Context: d.at(now), values: ctx}
	return b, noCancel
}
