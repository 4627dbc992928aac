package dedup

import (
	"context"
	"fmt"
)

// HandleBatch delivers many messages and returns one Outcome per message,
// in order. When the store is a BatchStore, every claim goes to the store in
// one round trip, the handlers run one after another in order, and every
// completion goes back in a second round trip; a heartbeat extends all
// claims still waiting or running. Messages that share a key inside the
// batch are deduplicated against the first of them. With another store,
// HandleBatch calls Handle for each message in turn.
func (r *Receiver[M, R]) HandleBatch(ctx context.Context, msgs []M) []Outcome[R] {
	out := make([]Outcome[R], len(msgs))
	if r.batcher == nil {
		for i, m := range msgs {
			out[i].Result, out[i].Err = r.Handle(ctx, m)
		}
		return out
	}

	// Phase 0: keys, in-memory duplicates, duplicates inside the batch.
	keys := make([]string, len(msgs))
	fps := make([]string, len(msgs))         // each message's fingerprint, computed once
	first := make(map[string]int, len(msgs)) // key -> index of its first message
	var todo []int                           // indexes that go to the store
	var items []AcquireItem
	for i, m := range msgs {
		id, err := r.idOf(m)
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
				out[i].Result, out[i].Err = r.replay(m, rec)
				continue
			}
		}
		todo = append(todo, i)
		items = append(items, AcquireItem{Key: key, Request: AcquireRequest{Lease: r.cfg.Lease, Fingerprint: fps[i]}})
	}

	if len(items) > 0 {
		r.runBatch(ctx, msgs, keys, todo, items, out)
	}

	// Later messages of a key repeated inside the batch follow the first.
	for i := range msgs {
		key := keys[i]
		if key == "" || first[key] == i {
			continue
		}
		f := out[first[key]]
		out[i].Result, out[i].Err = r.follow(key, fps[i], &flightOutcome[R]{res: f.Result, err: f.Err, fingerprint: fps[first[key]]})
	}
	return out
}

// runBatch claims items in one round trip, runs the handlers of the claimed
// ones in order under one heartbeat, and completes the successes in a second
// round trip. todo[k] is the index in msgs of items[k]; outcomes go to out.
func (r *Receiver[M, R]) runBatch(ctx context.Context, msgs []M, keys []string, todo []int, items []AcquireItem, out []Outcome[R]) {
	// Phase 1: claim everything in one round trip.
	claims := r.batcher.AcquireBatch(ctx, items)
	if len(claims) != len(items) {
		err := &StoreError{Op: "acquire", Err: fmt.Errorf("AcquireBatch returned %d outcomes for %d items", len(claims), len(items))}
		claims = make([]AcquireOutcome, len(items))
		for k := range claims {
			claims[k].Err = err
		}
	}
	hb := r.newHeartbeat(ctx)
	hbIndex := make([]int, len(items))
	for k, c := range claims {
		if c.Err == nil && c.Claim.Acquired {
			hbIndex[k] = hb.add(items[k].Key, c.Claim.Token, r.beaterOf(msgs[todo[k]]))
		}
	}
	hb.start()

	// Phase 2: run the handlers in order, collecting completions.
	var done []CompleteItem
	var doneAt []int // index into todo of each completion
	var encErrs []error
	for k, i := range todo {
		c := claims[k]
		switch {
		case c.Err != nil:
			out[i].Result, out[i].Err = r.acquireFailed(ctx, keys[i], msgs[i], c.Err)
			continue
		case !c.Claim.Acquired || c.Claim.Record.Attempt > r.cfg.MaxAttempts:
			out[i].Result, out[i].Err = r.afterClaim(ctx, keys[i], msgs[i], c.Claim, hb, hbIndex[k])
			continue
		}
		rec := c.Claim.Record
		v, herr := r.runClaimed(ctx, keys[i], c.Claim.Token, msgs[i], hb, hbIndex[k])
		if herr != nil {
			out[i].Result, out[i].Err = r.handlerFailed(ctx, keys[i], c.Claim.Token, rec.Attempt, herr)
			continue
		}
		out[i].Result = Result[R]{Status: StatusProcessed, Key: keys[i], Attempt: rec.Attempt, Value: v}
		data, encErr := r.encode(v)
		done = append(done, CompleteItem{Key: keys[i], Token: c.Claim.Token, Result: data, Retention: r.cfg.Retention})
		doneAt = append(doneAt, i)
		encErrs = append(encErrs, encErr)
	}
	hb.stop()

	// Phase 3: complete everything in one round trip.
	if len(done) > 0 {
		errs := r.batcher.CompleteBatch(detach(ctx), done)
		for k, i := range doneAt {
			var err error
			if k < len(errs) {
				err = errs[k]
			} else {
				err = fmt.Errorf("CompleteBatch returned %d errors for %d items", len(errs), len(done))
			}
			out[i].Result, out[i].Err = r.completed(ctx, out[i].Result, encErrs[k], err)
		}
	}
}
