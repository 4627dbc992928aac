package dedup

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"time"

	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/bridge"
	"github.com/dedup-go/dedup/internal/ctxkey"
	"github.com/dedup-go/dedup/store"
)

// timing collects the durations of one observed delivery. A nil *timing
// (no Observer) reads no clock.
type timing struct {
	handler, claim, complete time.Duration
}

func (t *timing) start() time.Time {
	if t == nil {
		return time.Time{}
	}
	return time.Now()
}

func (t *timing) addClaim(since time.Time) {
	if t != nil {
		t.claim += time.Since(since)
	}
}

func (t *timing) addComplete(since time.Time) {
	if t != nil {
		t.complete += time.Since(since)
	}
}

func (t *timing) addHandler(since time.Time) {
	if t != nil {
		t.handler += time.Since(since)
	}
}

// handed is a delivery handled for an adapter (see package adapter),
// before the adapter settled it.
type handed[R any] = bridge.Delivery[Result[R]]

// deliver is Handle and Decide for an adapter (adapter.Receiver.Deliver).
func (r *Receiver[M, R]) deliver(ctx context.Context, msg M) handed[R] {
	if r.cfg.Observer == nil {
		res, err := r.handle(ctx, msg, nil)
		d := handed[R]{Result: res, Err: err, Decision: r.decide(res, err), Ctx: ctx}
		r.noteDeadLetter(&d, msg)
		return d
	}
	return r.deliverObserved(ctx, msg)
}

// refused is the delivery of a message the adapter could not hand to the
// receiver (adapter.Receiver.Refused).
func (r *Receiver[M, R]) refused(ctx context.Context, msg M, err error) handed[R] {
	d := handed[R]{Err: err, Decision: r.decide(Result[R]{}, err), Ctx: ctx}
	r.noteDeadLetter(&d, msg)
	if r.cfg.Observer != nil {
		d.Ctx, d.Event.Origin = r.startDelivery(ctx, msg)
		d.Event.Namespace, d.Event.Err, d.Event.Decision, d.Observed = r.cfg.Namespace, err, d.Decision, true
	}
	return d
}

// startDelivery finds msg's origin and lets the Observer start the
// delivery.
func (r *Receiver[M, R]) startDelivery(ctx context.Context, msg M) (context.Context, delivery.Origin) {
	var o delivery.Origin
	if m, ok := any(msg).(delivery.Originer); ok {
		o = m.Origin()
	}
	o = fillOrigin(ctx, o)
	if s, ok := r.cfg.Observer.(delivery.DeliveryStarter); ok {
		if c := r.startSafely(ctx, s, o); c != nil {
			ctx = c
		}
	}
	return ctx, o
}

// startSafely calls s, recovering a panic (logged; the delivery goes on
// without what the Observer would have added).
func (r *Receiver[M, R]) startSafely(ctx context.Context, s delivery.DeliveryStarter, o delivery.Origin) (c context.Context) {
	defer func() {
		if p := recover(); p != nil {
			r.cfg.Logger.ErrorContext(ctx, "dedup: Observer's StartDelivery panicked", slog.Any("panic", p))
			c = nil
		}
	}()
	return s.StartDelivery(ctx, o)
}

// deliverObserved is Deliver with an Observer: it starts the delivery,
// times it and prepares its Event.
func (r *Receiver[M, R]) deliverObserved(ctx context.Context, msg M) handed[R] {
	ctx, origin := r.startDelivery(ctx, msg)
	var tm timing
	begin := time.Now()
	res, err := r.handle(ctx, msg, &tm)
	d := handed[R]{Result: res, Err: err, Decision: r.decide(res, err), Ctx: ctx, Observed: true}
	d.Event = r.event(origin, res.Key, res.Status, res.Attempt, res.Problem, err, d.Decision)
	d.Event.Duration, d.Event.HandlerDuration = time.Since(begin), tm.handler
	d.Event.ClaimDuration, d.Event.CompleteDuration, d.Event.StoreDuration = tm.claim, tm.complete, tm.claim+tm.complete
	return d
}

// event is the Event of an answered delivery, before its settlement.
func (r *Receiver[M, R]) event(o delivery.Origin, key string, st delivery.Status, attempt int, problem, err error, dec delivery.Decision) delivery.Event {
	return delivery.Event{
		Origin: o, Namespace: r.cfg.Namespace, Store: r.storeName, Key: key, Status: st, Attempt: attempt,
		Decision: dec, Err: err, Problem: problem, Stored: stored(st, problem),
	}
}

// stored reports whether a delivery answered with st and problem left its
// outcome in the store.
func stored(st delivery.Status, problem error) bool {
	switch st {
	case delivery.StatusDuplicate:
		return true
	case delivery.StatusProcessed:
		return problem == nil || !(errors.Is(problem, ErrResultNotStored) || errors.Is(problem, ErrLeaseLost))
	}
	return false
}

// handleObserved is Handle with an Observer: the delivery is reported as
// soon as it is answered.
func (r *Receiver[M, R]) handleObserved(ctx context.Context, msg M) (Result[R], error) {
	d := r.deliverObserved(ctx, msg)
	r.emit(d.Ctx, &d.Event)
	return d.Result, d.Err
}

// settle counts what an adapter carried out and reports it when the
// delivery was observed.
func (r *Receiver[M, R]) settle(ctx context.Context, e *delivery.Event, observed bool) {
	if e.Decision.Action == delivery.DeadLetter && e.SettleErr == nil {
		r.stats.deadLettered(e.Decision.Reason)
		r.logDeadLetter(ctx, e)
	}
	if observed {
		r.emit(ctx, e)
	}
}

// emit hands e to the Observer, recovering a panic.
func (r *Receiver[M, R]) emit(ctx context.Context, e *delivery.Event) {
	defer func() {
		if p := recover(); p != nil {
			r.cfg.Logger.ErrorContext(ctx, "dedup: Observer panicked", slog.Any("panic", p), slog.String("key", e.Key))
		}
	}()
	r.cfg.Observer.Observe(ctx, *e)
}

// observe hands e to Config.Observer, if there is one
// (adapter.Receiver.Observe).
func (r *Receiver[M, R]) observe(ctx context.Context, e delivery.Event) {
	if r.cfg.Observer == nil {
		return
	}
	if e.Namespace == "" {
		e.Namespace = r.cfg.Namespace
	}
	e.Origin = fillOrigin(ctx, e.Origin)
	r.emit(ctx, &e)
}

// storeName names s by the last element of its type's package path
// ("redisstore"), for Event.Store: a metric attribute of few values.
func storeName(s store.Store) string {
	t := reflect.TypeOf(s)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	p := t.PkgPath()
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		p = p[i+1:]
	}
	return cmp.Or(p, t.Name())
}

// fillOrigin returns o completed by the fill adapter.WithOrigin put in
// ctx, if any.
func fillOrigin(ctx context.Context, o delivery.Origin) delivery.Origin {
	if fill, ok := ctx.Value(ctxkey.OriginFill{}).(func(delivery.Origin) delivery.Origin); ok {
		return fill(o)
	}
	return o
}
