package dedup

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"time"

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

// Delivery is one message handled for an adapter, until the adapter
// settled it: [Receiver.Deliver] runs Handle and Decide, the adapter
// carries out the Decision (ack, retry, dead letter) and reports it with
// Settled, which hands the Observer one Event for the whole delivery.
type Delivery[R any] struct {
	Result   Result[R]
	Err      error
	Decision Decision

	ctx      context.Context
	rcv      settler
	ev       Event
	observed bool // ev is to be reported
	settled  bool
}

// settler is the part of a Receiver a Delivery reports to.
type settler interface {
	settle(ctx context.Context, e *Event, observed bool)
}

// Context is the delivery's context: the caller's, with what the
// Observer's StartDelivery added (a span). Use it for what the adapter
// does next (a dead letter carries its trace context).
func (d *Delivery[R]) Context() context.Context { return d.ctx }

// Settlement is what an adapter did with a delivery.
type Settlement struct {
	// Decision is what was carried out; the zero value means the
	// Delivery's own Decision.
	Decision Decision
	// Duration is how long carrying it out took.
	Duration time.Duration
	// Err is what kept the adapter from carrying it out, nil when it did.
	Err error
}

// Settled reports what the adapter did with the delivery: the Observer
// gets one Event, and a dead letter the broker took is counted in the
// receiver's Stats. Later calls do nothing.
func (d *Delivery[R]) Settled(s Settlement) {
	if d.settled || d.rcv == nil {
		return
	}
	d.settled = true
	if s.Decision.Action == 0 {
		s.Decision = d.Decision
	}
	d.ev.Decision = s.Decision
	d.ev.Settled, d.ev.SettleDuration, d.ev.SettleErr = true, s.Duration, s.Err
	d.rcv.settle(d.ctx, &d.ev, d.observed)
}

// Deliver is Handle and Decide for an adapter: it handles msg and returns
// the Delivery for the adapter to carry out and then report with
// Settled. With an Observer that is a [DeliveryStarter], the handler runs
// under the context StartDelivery returned.
func (r *Receiver[M, R]) Deliver(ctx context.Context, msg M) Delivery[R] {
	if r.cfg.Observer == nil {
		res, err := r.handle(ctx, msg, nil)
		d := Delivery[R]{Result: res, Err: err, Decision: r.Decide(res, err), ctx: ctx, rcv: r}
		r.noteDeadLetter(&d, msg)
		return d
	}
	return r.deliverObserved(ctx, msg)
}

// Refused returns the Delivery of a message the adapter could not hand to
// the receiver, because of err (an undecodable body: ErrUndecodable): its
// Decision is Decide's for err.
func (r *Receiver[M, R]) Refused(ctx context.Context, msg M, err error) Delivery[R] {
	d := Delivery[R]{Err: err, Decision: r.Decide(Result[R]{}, err), ctx: ctx, rcv: r}
	r.noteDeadLetter(&d, msg)
	if r.cfg.Observer != nil {
		d.ctx, d.ev.Origin = r.startDelivery(ctx, msg)
		d.ev.Namespace, d.ev.Err, d.ev.Decision, d.observed = r.cfg.Namespace, err, d.Decision, true
	}
	return d
}

// startDelivery finds msg's origin and lets the Observer start the
// delivery.
func (r *Receiver[M, R]) startDelivery(ctx context.Context, msg M) (context.Context, Origin) {
	var o Origin
	if m, ok := any(msg).(Originer); ok {
		o = m.Origin()
	}
	o = fillOrigin(ctx, o)
	if s, ok := r.cfg.Observer.(DeliveryStarter); ok {
		if c := r.startSafely(ctx, s, o); c != nil {
			ctx = c
		}
	}
	return ctx, o
}

// startSafely calls s, recovering a panic (logged; the delivery goes on
// without what the Observer would have added).
func (r *Receiver[M, R]) startSafely(ctx context.Context, s DeliveryStarter, o Origin) (c context.Context) {
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
func (r *Receiver[M, R]) deliverObserved(ctx context.Context, msg M) Delivery[R] {
	ctx, origin := r.startDelivery(ctx, msg)
	var tm timing
	begin := time.Now()
	res, err := r.handle(ctx, msg, &tm)
	d := Delivery[R]{Result: res, Err: err, Decision: r.Decide(res, err), ctx: ctx, rcv: r, observed: true}
	d.ev = r.event(origin, res.Key, res.Status, res.Attempt, res.Problem, err, d.Decision)
	d.ev.Duration, d.ev.HandlerDuration = time.Since(begin), tm.handler
	d.ev.ClaimDuration, d.ev.CompleteDuration, d.ev.StoreDuration = tm.claim, tm.complete, tm.claim+tm.complete
	return d
}

// event is the Event of an answered delivery, before its settlement.
func (r *Receiver[M, R]) event(o Origin, key string, st Status, attempt int, problem, err error, dec Decision) Event {
	return Event{
		Origin: o, Namespace: r.cfg.Namespace, Store: r.storeName, Key: key, Status: st, Attempt: attempt,
		Decision: dec, Err: err, Problem: problem, Stored: stored(st, problem),
	}
}

// stored reports whether a delivery answered with st and problem left its
// outcome in the store.
func stored(st Status, problem error) bool {
	switch st {
	case StatusDuplicate:
		return true
	case StatusProcessed:
		return problem == nil || !(errors.Is(problem, ErrResultNotStored) || errors.Is(problem, ErrLeaseLost))
	}
	return false
}

// handleObserved is Handle with an Observer: the delivery is reported as
// soon as it is answered.
func (r *Receiver[M, R]) handleObserved(ctx context.Context, msg M) (Result[R], error) {
	d := r.deliverObserved(ctx, msg)
	r.emit(d.ctx, &d.ev)
	return d.Result, d.Err
}

// settle counts what an adapter carried out and reports it when the
// delivery was observed.
func (r *Receiver[M, R]) settle(ctx context.Context, e *Event, observed bool) {
	if e.Decision.Action == DeadLetter && e.SettleErr == nil {
		r.stats.deadLettered(e.Decision.Reason)
		r.logDeadLetter(ctx, e)
	}
	if observed {
		r.emit(ctx, e)
	}
}

// emit hands e to the Observer, recovering a panic.
func (r *Receiver[M, R]) emit(ctx context.Context, e *Event) {
	defer func() {
		if p := recover(); p != nil {
			r.cfg.Logger.ErrorContext(ctx, "dedup: Observer panicked", slog.Any("panic", p), slog.String("key", e.Key))
		}
	}()
	r.cfg.Observer.Observe(ctx, *e)
}

// Observe hands e to Config.Observer, if there is one: for an adapter to
// report a delivery it never handed to the receiver (one that arrived
// after Stop and went back to the broker unhandled). Its Origin is
// completed as a handled delivery's is ([WithOrigin]). A panicking
// observer is recovered and logged.
func (r *Receiver[M, R]) Observe(ctx context.Context, e Event) {
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
