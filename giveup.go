package dedup

import (
	"context"
	"errors"
	"fmt"

	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
)

// This file joins giving up, and the compensations it runs (compensate.go),
// to the receiver's handling of a claim.

// compensationContext returns a context holding hctx's claim for the
// compensations, which the heartbeat (entry idx) cancels when the lease
// is lost: the handler's own context ended when it returned.
func (r *Receiver[M, R]) compensationContext(ctx context.Context, hctx *handlerContext, hb *heartbeat, idx int) (*handlerContext, bool) {
	c := new(handlerContext)
	c.init(ctx, hctx.held.Key, hctx.held.Token, hctx.held.Attempt, r.cfg.Retention)
	c.steps = r.steps
	run := hctx.stepRun()
	run.mu.Lock()
	if hctx.held.StepsGeneration() != run.gen {
		// The handler's transaction rolled back the steps it recorded
		// after the run last read them: read them again rather than
		// compensate steps that never happened.
		run.loaded, run.stale = false, true
	}
	run.gen = c.held.StepsGeneration() // this context's claim counts anew
	run.mu.Unlock()
	c.run.Store(run)
	return c, hb.running(idx, c)
}

// failedGivingUp runs the compensations of a message whose handler failed
// with herr when Decide would dead-letter it, then releases the claim. It
// reports false when the message is not given up (the caller goes on as
// for any failure).
func (r *Receiver[M, R]) failedGivingUp(ctx context.Context, hctx *handlerContext, msg M, herr error, hb *heartbeat, idx int) (Result[R], error, bool) {
	held := &hctx.held
	if errors.Is(herr, ErrLeaseLost) || errors.Is(herr, ErrStoreUnavailable) || ctx.Err() != nil {
		return Result[R]{}, nil, false
	}
	var dec delivery.Decision
	if errors.Is(herr, ErrStepRefused) {
		// A step refused because the message is being given up (by an
		// earlier delivery that stopped halfway): finish the compensations.
		dec = delivery.Decision{Action: delivery.DeadLetter, Reason: delivery.ReasonPermanent}
	} else {
		dec = r.decide(Result[R]{Key: held.Key, Attempt: held.Attempt}, &HandlerError{Key: held.Key, Attempt: held.Attempt, Err: herr})
	}
	if dec.Action != delivery.DeadLetter {
		return Result[R]{}, nil, false
	}
	res, err := r.runGiveUp(ctx, hctx, msg, dec.Reason, herr.Error(), hb, idx)
	if err != nil {
		return res, err, true
	}
	hb.finish(idx)
	out, ferr := r.handlerFailed(ctx, held.Key, held.Token, held.Attempt, herr)
	return out, ferr, true
}

// resumeGiveUp looks, for a claim after the first attempt, for a message
// given up by an earlier delivery: it finishes its compensations (or finds
// them done) and answers without running the handler. A claim past
// MaxAttempts is given up here too. It reports false for a claim whose
// handler runs.
func (r *Receiver[M, R]) resumeGiveUp(ctx context.Context, hctx *handlerContext, msg M, claim *store.Claim, hb *heartbeat, idx int) (Result[R], error, bool) {
	held := &hctx.held
	run := hctx.stepRun()
	run.mu.Lock()
	err := run.ensure(ctx, r.steps, held)
	m, marked := run.recs[stepMarker]
	run.mu.Unlock()
	if err != nil {
		hb.finish(idx)
		r.release(ctx, held.Key, held.Token, err.Error())
		return Result[R]{Key: held.Key, Attempt: held.Attempt}, r.stepsFailed(held.Key, err), true
	}
	if marked {
		// Given up by an earlier delivery: finish (or find done) its
		// compensations, with the reason it was first given up for.
		g := markerState(m)
		res, err := r.runGiveUp(ctx, hctx, msg, g.reason, g.cause, hb, idx)
		if err != nil {
			return res, err, true
		}
		hb.finish(idx)
		r.release(ctx, held.Key, held.Token, "given up: "+g.cause)
		return Result[R]{Key: held.Key, Attempt: held.Attempt}, &GivenUpError{Key: held.Key, Reason: g.reason, Cause: g.cause}, true
	}
	if claim.Record.Attempt <= r.cfg.MaxAttempts {
		return Result[R]{}, nil, false
	}
	why := fmt.Errorf("%w: %q claimed %d times, limit %d (last error: %s)", ErrAttemptsExhausted, held.Key, held.Attempt, r.cfg.MaxAttempts, claim.Record.LastError)
	res, err := r.runGiveUp(ctx, hctx, msg, delivery.ReasonAttemptsExhausted, why.Error(), hb, idx)
	if err != nil {
		return res, err, true
	}
	hb.finish(idx)
	r.release(ctx, held.Key, held.Token, "attempts exhausted")
	return Result[R]{Key: held.Key, Attempt: held.Attempt}, why, true
}

// runGiveUp runs giveUp under a compensation context. On an error it
// releases the claim (unless it was lost) and returns the error to
// decide on: a CompensationError is retried with backoff, or
// dead-lettered once final; a lost lease or a store outage is retried.
func (r *Receiver[M, R]) runGiveUp(ctx context.Context, hctx *handlerContext, msg M, reason delivery.Reason, cause string, hb *heartbeat, idx int) (Result[R], error) {
	held := &hctx.held
	res := Result[R]{Key: held.Key, Attempt: held.Attempt}
	cctx, ok := r.compensationContext(ctx, hctx, hb, idx)
	var err error
	if !ok {
		err = fmt.Errorf("dedup: %q: %w before the compensations started", held.Key, ErrLeaseLost)
	} else {
		err = r.giveUp(cctx, msg, reason, cause)
	}
	cctx.end()
	if err == nil {
		return res, nil
	}
	hb.finish(idx)
	if !errors.Is(err, ErrLeaseLost) {
		r.release(ctx, held.Key, held.Token, err.Error())
	}
	var ce *CompensationError
	if errors.As(err, &ce) {
		return res, err
	}
	return res, r.stepsFailed(held.Key, err)
}

// stepsFailed reports a failure of the step records themselves (the store
// down, the lease lost) while giving up: retried, never dead-lettered.
func (r *Receiver[M, R]) stepsFailed(key string, err error) error {
	switch {
	case errors.Is(err, ErrLeaseLost), errors.Is(err, ErrStoreUnavailable):
		return err
	case errors.Is(err, ErrCanceled):
		return err
	}
	return storeError("steps", key, err)
}
