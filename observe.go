package dedup

import (
	"context"
	"log/slog"
	"time"
)

// timing collects the durations of one observed delivery. A nil *timing
// (no Observer) reads no clock.
type timing struct {
	handler, store time.Duration
}

func (t *timing) start() time.Time {
	if t == nil {
		return time.Time{}
	}
	return time.Now()
}

func (t *timing) addStore(since time.Time) {
	if t != nil {
		t.store += time.Since(since)
	}
}

func (t *timing) addHandler(since time.Time) {
	if t != nil {
		t.handler += time.Since(since)
	}
}

// handleObserved is Handle with an Observer: it times the delivery and
// reports it.
func (r *Receiver[M, R]) handleObserved(ctx context.Context, msg M) (Result[R], error) {
	var tm timing
	begin := time.Now()
	res, err := r.handle(ctx, msg, &tm)
	r.Observe(ctx, Event{
		Kind: EventHandled, Namespace: r.cfg.Namespace, Key: res.Key, Status: res.Status, Attempt: res.Attempt,
		Err: err, Problem: res.Problem,
		Duration: time.Since(begin), HandlerDuration: tm.handler, StoreDuration: tm.store,
	})
	return res, err
}

// Observe hands e to Config.Observer, if there is one. Adapters report what
// they did with each delivery through it (EventSettled), so that one
// observer sees every outcome of every broker. A panicking observer is
// recovered and logged.
func (r *Receiver[M, R]) Observe(ctx context.Context, e Event) {
	if r.cfg.Observer == nil {
		return
	}
	if e.Namespace == "" {
		e.Namespace = r.cfg.Namespace
	}
	defer func() {
		if p := recover(); p != nil {
			r.cfg.Logger.ErrorContext(ctx, "dedup: Observer panicked", slog.Any("panic", p), slog.String("key", e.Key))
		}
	}()
	r.cfg.Observer.Observe(ctx, e)
}
