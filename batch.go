package dedup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
)

// HandleBatch delivers many messages and returns one Outcome per message,
// in order. When the store is a store.BatchStore, every claim goes to the
// store in one round trip, the handlers run one after another in order, and
// every completion goes back in a second round trip; a heartbeat extends
// all claims still waiting or running, in one round trip per beat. Messages
// that share a key inside the batch are deduplicated against the first of
// them. With another store, HandleBatch calls Handle for each message in
// turn. Each outcome follows Handle's rules: a done status has a nil Err.
//
// The price of one completion round trip per batch: the batch's successes
// are recorded together, after its last handler. A process that dies
// before then leaves them unrecorded, and their redeliveries run again:
// the window between an effect and its record is the rest of the batch,
// where Handle's is one completion round trip. Keep batches short (in
// time) where a repeated effect is costly, or complete inside the
// handler's own transaction (pgstore), which closes the window.
func (r *Receiver[M, R]) HandleBatch(ctx context.Context, msgs []M) []Outcome[R] {
	if r.cfg.Observer == nil {
		return r.handleBatch(ctx, msgs, nil)
	}
	ds := r.deliverBatch(ctx, msgs)
	out := make([]Outcome[R], len(ds))
	for i := range ds {
		r.emit(ds[i].Ctx, &ds[i].Event)
		out[i] = Outcome[R]{Result: ds[i].Result, Err: ds[i].Err}
	}
	return out
}

// deliverBatch is HandleBatch and Decide for an adapter
// (adapter.Receiver.DeliverBatch).
func (r *Receiver[M, R]) deliverBatch(ctx context.Context, msgs []M) []handed[R] {
	ds := make([]handed[R], len(msgs))
	if r.cfg.Observer == nil {
		for i, o := range r.handleBatch(ctx, msgs, nil) {
			ds[i] = handed[R]{Result: o.Result, Err: o.Err, Decision: r.decide(o.Result, o.Err), Ctx: ctx}
			r.noteDeadLetter(&ds[i], msgs[i])
		}
		return ds
	}
	ctxs := make([]context.Context, len(msgs))
	origins := make([]delivery.Origin, len(msgs))
	for i, m := range msgs {
		ctxs[i], origins[i] = r.startDelivery(ctx, m)
	}
	begin := time.Now()
	out := r.handleBatch(ctx, msgs, ctxs)
	took := time.Since(begin)
	for i, o := range out {
		d := &ds[i]
		*d = handed[R]{Result: o.Result, Err: o.Err, Decision: r.decide(o.Result, o.Err), Ctx: ctxs[i], Observed: true}
		d.Event = r.event(origins[i], o.Result.Key, o.Result.Status, o.Result.Attempt, o.Result.Problem, o.Err, d.Decision)
		d.Event.Duration = took
	}
	return ds
}

// handleBatch is HandleBatch; ctxs, when not nil, holds the context each
// message's handler runs under.
func (r *Receiver[M, R]) handleBatch(ctx context.Context, msgs []M, ctxs []context.Context) []Outcome[R] {
	out := make([]Outcome[R], len(msgs))
	ctxOf := func(i int) context.Context {
		if ctxs == nil {
			return ctx
		}
		return ctxs[i]
	}
	if r.batcher == nil || r.steps != nil {
		// A handler with steps runs each message alone: its steps and
		// compensations are a delivery's.
		for i, m := range msgs {
			out[i].Result, out[i].Err = r.handle(ctxOf(i), m, nil)
		}
		return out
	}

	// Phase 0: keys, in-memory duplicates, duplicates inside the batch.
	keys := make([]string, len(msgs))
	fps := make([]string, len(msgs))         // each message's fingerprint, computed once
	first := make(map[string]int, len(msgs)) // key -> index of its first message
	todo := make([]int, 0, len(msgs))        // indexes that go to the store
	reqs := make([]store.AcquireRequest, 0, len(msgs))
	now := r.cfg.Clock.Now()
	for i, m := range msgs {
		id, err := r.checkID(m)
		if err != nil {
			out[i].Err = err
			continue
		}
		key := r.prefix + id
		if fps[i], err = r.fingerprintOf(m); err != nil {
			out[i] = Outcome[R]{Result: Result[R]{Key: key}, Err: err}
			continue
		}
		keys[i] = key
		if _, seen := first[key]; seen {
			continue
		}
		first[key] = i
		if r.peeker != nil {
			if rec := r.peeker.Peek(r.prefix, id); rec != nil {
				out[i].Result, out[i].Err = r.replay(ctxOf(i), m, rec)
				continue
			}
		}
		todo = append(todo, i)
		reqs = append(reqs, store.AcquireRequest{Key: key, Lease: r.cfg.Lease, Fingerprint: fps[i], Token: r.lost.take(key, now)})
	}

	if len(reqs) > 0 {
		r.runBatch(ctx, msgs, ctxOf, keys, todo, reqs, out)
	}

	// Later messages of a key repeated inside the batch follow the first.
	for i := range msgs {
		key := keys[i]
		if key == "" || first[key] == i {
			continue
		}
		f := out[first[key]]
		out[i].Result, out[i].Err = r.share(ctx, key, fps[i], msgs[i], fps[first[key]], f.Result, f.Err, nil)
	}
	return out
}

// runBatch claims reqs in one round trip, runs the handlers of the claimed
// ones in order under one heartbeat, and completes the successes in a second
// round trip. todo[k] is the index in msgs of reqs[k]; outcomes go to out.
func (r *Receiver[M, R]) runBatch(ctx context.Context, msgs []M, ctxOf func(int) context.Context, keys []string, todo []int, reqs []store.AcquireRequest, out []Outcome[R]) {
	if ctx.Err() != nil {
		now := r.cfg.Clock.Now()
		for k, i := range todo {
			// The token taken for the claim goes back: it may be a lost
			// claim's, which the next delivery of the key asks for.
			r.lost.settle(reqs[k].Key, reqs[k].Token, ctx.Err(), now, r.cfg.Lease)
			out[i] = Outcome[R]{Result: Result[R]{Key: keys[i]}, Err: fmt.Errorf("%w: before claiming %q: %w", ErrCanceled, keys[i], context.Cause(ctx))}
		}
		return
	}
	// Phase 1: claim everything in one round trip.
	sent := r.cfg.Clock.Now()
	claims := r.batcher.AcquireBatch(ctx, reqs)
	if len(claims) != len(reqs) {
		err := &store.OpError{Op: "acquire", Err: fmt.Errorf("AcquireBatch returned %d outcomes for %d requests", len(claims), len(reqs))}
		claims = make([]store.AcquireOutcome, len(reqs))
		for k := range claims {
			claims[k].Err = err
		}
	}
	for k := range claims {
		r.lost.settle(reqs[k].Key, reqs[k].Token, claims[k].Err, sent, r.cfg.Lease)
		if claims[k].Err == nil {
			claims[k].Err = r.checkClaim(reqs[k].Key, &claims[k].Claim, sent)
		}
	}
	// One heartbeat extends every claim still waiting, running or being
	// completed, in one round trip per beat.
	hb := r.newHeartbeat(ctx)
	hb.entries = make([]heartbeatEntry, 0, len(reqs))
	defer hb.stop()
	hbIndex := make([]int, len(reqs))
	for k, c := range claims {
		if c.Err == nil && c.Claim.Acquired {
			hbIndex[k] = hb.add(reqs[k].Key, c.Claim.Token, r.beaterOf(msgs[todo[k]]), sent)
		}
	}
	hb.start()

	// Phase 2: run the handlers in order, collecting completions. The
	// claims the handlers hold and their contexts are one allocation for
	// the batch.
	done := make([]store.CompleteRequest, 0, len(todo))
	doneAt := make([]int, 0, len(todo)) // index into todo of each completion
	encErrs := make([]error, 0, len(todo))
	running := make([]handlerContext, len(todo))
	for k, i := range todo {
		c := &claims[k]
		if c.Err != nil {
			out[i].Result, out[i].Err = r.acquireFailed(ctx, keys[i], msgs[i], c.Err, nil)
			continue
		}
		if c.Claim.Acquired && c.Claim.Record.Attempt > r.cfg.MaxAttempts {
			hb.finish(hbIndex[k]) // released next: no more extensions
		}
		if res, err, ok := r.notClaimed(ctx, keys[i], msgs[i], &c.Claim); ok {
			out[i].Result, out[i].Err = res, err
			continue
		}
		attempt := c.Claim.Record.Attempt
		hctx := &running[k]
		hctx.init(ctxOf(i), keys[i], c.Claim.Token, attempt, r.cfg.Retention)
		v, herr := r.runClaimed(hctx, msgs[i], hb, hbIndex[k], nil)
		if herr != nil {
			hb.finish(hbIndex[k])
			out[i].Result, out[i].Err = r.handlerFailed(ctx, keys[i], c.Claim.Token, attempt, herr)
			continue
		}
		out[i].Result = Result[R]{Status: delivery.StatusProcessed, Key: keys[i], Attempt: attempt, Value: v}
		data, encErr := r.encode(v)
		if hctx.held.Completed() {
			hb.finish(hbIndex[k])
			r.completed(ctx, &out[i].Result, encErr, nil)
			continue
		}
		done = append(done, store.CompleteRequest{Key: keys[i], Token: c.Claim.Token, Result: data, Retention: r.cfg.Retention})
		doneAt = append(doneAt, k)
		encErrs = append(encErrs, encErr)
	}

	// Phase 3: complete everything in one round trip, detached from the
	// caller's cancellation like a single completion; a completion that
	// failed for want of the store is retried alone while its lease holds.
	if len(done) == 0 {
		return
	}
	dctx := detached(ctx)
	cctx, cancel := context.WithTimeout(dctx, r.cfg.StoreTimeout)
	errs := r.batcher.CompleteBatch(cctx, done)
	cancel()
	for n, k := range doneAt {
		i := todo[k]
		var err error
		if n < len(errs) {
			err = errs[n]
		} else {
			err = &store.OpError{Op: "complete", Key: done[n].Key, Err: fmt.Errorf("CompleteBatch returned %d errors for %d requests", len(errs), len(done))}
		}
		if err != nil && !errors.Is(err, ErrLeaseLost) {
			err = r.completeHeld(dctx, done[n], hb, hbIndex[k], nil, &out[i].Result)
		}
		hb.finish(hbIndex[k])
		r.completed(ctx, &out[i].Result, encErrs[n], err)
	}
}
