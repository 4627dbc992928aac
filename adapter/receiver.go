package adapter

import (
	"context"
	"log/slog"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/bridge"
)

// Receiver is an adapter's view of a *dedup.Receiver: what the
// application developer's Receiver does (Handle, Lease, Retention, ...,
// through the embedded pointer), and what only an adapter or middleware
// needs: Deliver and its kin, which hand back a Delivery for the adapter to
// carry out and settle.
//
// Make one with Bind when the consumer is made, and keep it: Bind costs
// an allocation, a Receiver's methods none of their own.
type Receiver[M, R any] struct {
	*dedup.Receiver[M, R]
	p port[M, R]
}

// port is what package dedup's Receiver offers adapters (see
// internal/bridge).
type port[M, R any] interface {
	Deliver(ctx context.Context, msg M) bridge.Delivery[dedup.Result[R]]
	DeliverBatch(ctx context.Context, msgs []M) []bridge.Delivery[dedup.Result[R]]
	Refused(ctx context.Context, msg M, err error) bridge.Delivery[dedup.Result[R]]
	Settle(ctx context.Context, e *delivery.Event, observed bool)
	Observe(ctx context.Context, e delivery.Event)
	Inject(ctx context.Context, set func(key, value string))
	Decide(res dedup.Result[R], err error) delivery.Decision
	Logger() *slog.Logger
	StoreRetryDelay() time.Duration
}

// Bind returns the adapter's view of r. It returns nil for a nil r, which
// an adapter refuses with an error matching dedup.ErrInvalidConfig.
func Bind[M, R any](r *dedup.Receiver[M, R]) *Receiver[M, R] {
	if r == nil {
		return nil
	}
	return &Receiver[M, R]{Receiver: r, p: bridge.Port(r).(port[M, R])}
}

// Deliver is Handle and Decide: it handles msg and returns the Delivery
// for the adapter to carry out and then report with Settled. With an
// Observer that is a delivery.DeliveryStarter, the handler runs under the
// context StartDelivery returned.
func (r *Receiver[M, R]) Deliver(ctx context.Context, msg M) Delivery[R] {
	return handed(r.p, r.p.Deliver(ctx, msg))
}

// DeliverBatch is HandleBatch and Decide: one Delivery per message, in
// order, each to be carried out and reported with Settled. With an
// Observer that is a delivery.DeliveryStarter, each message's handler runs
// under the context StartDelivery returned for it.
func (r *Receiver[M, R]) DeliverBatch(ctx context.Context, msgs []M) []Delivery[R] {
	bs := r.p.DeliverBatch(ctx, msgs)
	ds := make([]Delivery[R], len(bs))
	for i := range bs {
		ds[i] = handed(r.p, bs[i])
	}
	return ds
}

// Refused returns the Delivery of a message the adapter could not hand to
// the receiver, because of err (an undecodable body: dedup.ErrUndecodable):
// its Decision is Decide's for err.
func (r *Receiver[M, R]) Refused(ctx context.Context, msg M, err error) Delivery[R] {
	return handed(r.p, r.p.Refused(ctx, msg, err))
}

// Decide maps an outcome of Handle to what the adapter does with the
// delivery, with the receiver's MaxAttempts, Backoff and StoreRetryDelay:
//
//	processed, duplicate, bypassed                       Ack (reason result-not-stored when Result.Problem is set)
//	in flight elsewhere                                  Retry after Result.RetryAfter (200 ms, doubling up to the remaining lease)
//	handler error, attempts left                         Retry with backoff
//	permanent error, attempts exhausted, no key,
//	invalid key, undecodable body, key reused            DeadLetter with the reason
//	store unavailable (fail-closed)                      Retry after StoreRetryDelay
//	store misconfigured (ErrInvalidConfig: a table or    Retry after StoreRetryDelay: nothing is lost
//	a right missing)                                     while an operator fixes it
//	caller's context ended (shutdown): ErrCanceled       Retry with the first backoff
//	handler cancelled because its lease was lost         Retry with the first backoff (in flight elsewhere)
//
// A handler that fails with its own deadline (context.DeadlineExceeded of
// a context it made) is a handler error like any other: it backs off and
// counts towards MaxAttempts. Only the end of the caller's context means
// "not processed".
func (r *Receiver[M, R]) Decide(res dedup.Result[R], err error) delivery.Decision {
	return r.p.Decide(res, err)
}

// Observe hands e to the receiver's Observer, if it has one: for an
// adapter to report a delivery it never handed to the receiver (one that
// arrived after Stop and went back to the broker unhandled). Its Origin is
// completed as a handled delivery's is ([WithOrigin]). A panicking
// observer is recovered and logged.
func (r *Receiver[M, R]) Observe(ctx context.Context, e delivery.Event) { r.p.Observe(ctx, e) }

// Inject writes the trace context of ctx through set when the receiver's
// Observer is a delivery.Injector; else it does nothing. Adapters call it
// on the dead letters and retry copies they publish.
func (r *Receiver[M, R]) Inject(ctx context.Context, set func(key, value string)) {
	r.p.Inject(ctx, set)
}

// Logger is the receiver's logger (Config.Logger), which an adapter logs
// to as well.
func (r *Receiver[M, R]) Logger() *slog.Logger { return r.p.Logger() }

// StoreRetryDelay is Config.StoreRetryDelay: how long an adapter waits
// before handing a message back when the store is unavailable.
func (r *Receiver[M, R]) StoreRetryDelay() time.Duration { return r.p.StoreRetryDelay() }
