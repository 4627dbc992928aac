package dedup

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/store"
)

// heartbeat extends the leases of claims whose handlers (or completions)
// are still working. Its first beat comes a third of the lease after the
// claim: a single delivery's heartbeat waits for it in the receiver's
// beatQueue, under one timer shared by all deliveries, so a handler that
// finishes sooner costs no timer and no goroutine; a batch's arms a timer
// of its own. When a beat runs, it extends every unfinished claim, tells
// the broker (the message's Heartbeater) and arms a timer of the
// heartbeat's own for the next.
//
// It also keeps, on the local clock, when each lease ends as far as the
// store has confirmed: the time before the claim (or the last successful
// extension) was sent, plus the lease. A claim whose extension has not been
// confirmed by that deadline, less a margin for clock drift, is lost
// locally, even when the store cannot be reached to say so: another process
// may take it over. A lost claim (found by the store or locally) has its
// handler's context cancelled with ErrLeaseLost as the cause, and its
// message's Heartbeater is no longer called.
type heartbeat struct {
	*beatConfig
	parent context.Context // the caller's context, for its values

	// queue holds a single delivery's heartbeat until its first beat is
	// due (nil for a batch's, which arms a timer of its own at once).
	queue        *beatQueue
	qprev, qnext *heartbeat // queue links; under queue.mu
	queued       bool       // in queue; under queue.mu
	// timed: stop found h handed to timers of its own, one of which may
	// still run a beat that finds h stopped. Its owner's alone.
	timed bool

	mu      sync.Mutex
	stopped bool
	timer   clock.Timer
	beating sync.WaitGroup // a beat in progress, waited for by stop
	entries []heartbeatEntry
	one     [1]heartbeatEntry // backing array for the single-message case
}

type heartbeatEntry struct {
	key   string
	token store.Token
	beat  heartbeater     // the message's own heartbeat, or nil
	hctx  *handlerContext // set once the handler starts, until finish
	// confirmed is when the claim, or its last extension that the store
	// confirmed, was sent, on the local clock: the lease holds until a
	// lease after it.
	confirmed time.Time
	done      bool // finished: no more extensions
	lost      bool // the store said ErrLeaseLost, or the lease passed unconfirmed
}

// beatConfig is what every heartbeat of a receiver shares, kept once in
// the receiver so that each delivery's block stays small.
type beatConfig struct {
	store    store.Store
	batcher  store.BatchStore // extends many claims in one round trip, when the store can
	clock    clock.Clock
	lease    time.Duration
	interval time.Duration
	margin   time.Duration // how long before a lease's local end it is given up
	logger   *slog.Logger
}

func (r *Receiver[M, R]) newHeartbeat(ctx context.Context) *heartbeat {
	return r.initHeartbeat(ctx, new(heartbeat))
}

// initHeartbeat sets up h, which is zero, and returns it.
func (r *Receiver[M, R]) initHeartbeat(ctx context.Context, h *heartbeat) *heartbeat {
	h.beatConfig, h.parent = &r.beatCfg, ctx
	h.entries = h.one[:0]
	return h
}

// firstBeat is when a queued heartbeat of one claim is due for its first
// beat: an interval after the claim was sent.
func (h *heartbeat) firstBeat() time.Time {
	return h.entries[0].confirmed.Add(h.interval)
}

// add registers a claim before start and returns its index. claimed is
// when the Acquire that made the claim was sent, on the local clock.
func (h *heartbeat) add(key string, token store.Token, beat heartbeater, claimed time.Time) int {
	h.entries = append(h.entries, heartbeatEntry{key: key, token: token, beat: beat, confirmed: claimed})
	return len(h.entries) - 1
}

// giveUp is when the lease of e ends, as far as the store confirmed it,
// less the margin for clock drift: past it, the claim is lost locally.
func (h *heartbeat) giveUp(e *heartbeatEntry) time.Time {
	return e.confirmed.Add(h.lease - h.margin)
}

// start arms the first beat on a timer of h's own.
func (h *heartbeat) start() { h.arm(h.interval) }

// startQueued queues h, which holds one claim, in q for its first beat: a
// handler that finishes sooner costs no timer.
func (h *heartbeat) startQueued(q *beatQueue) {
	h.queue = q
	q.add(h)
}

// arm arms the next beat in d, unless h was stopped.
func (h *heartbeat) arm(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.stopped {
		h.timer = h.clock.AfterFunc(d, h.beat)
	}
}

// running records that claim i's handler starts under hctx, which a lost
// lease cancels (until finish: a handler's context that ended already is
// not cancelled again). It reports false when the claim was already lost.
func (h *heartbeat) running(i int, hctx *handlerContext) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.entries[i].hctx = hctx
	return !h.entries[i].lost
}

// finish stops extending claim i.
func (h *heartbeat) finish(i int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.entries[i].done = true
	h.entries[i].hctx = nil
}

// holds reports whether claim i still holds its lease as far as this
// process knows, and until when (on the local clock, less the margin).
func (h *heartbeat) holds(i int) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := &h.entries[i]
	end := h.giveUp(e)
	return end, !e.lost && h.clock.Now().Before(end)
}

// stop stops the timer and waits for a beat in progress, so that no
// extension runs after the caller completes or releases its claims. A
// heartbeat that stop took out of its queue was never reachable from a
// timer, and nothing but its owner reaches it now; one that had left the
// queue may still be reached by a timer that already fired, and is marked
// timed.
func (h *heartbeat) stop() {
	if h.queue != nil && h.queue.remove(h) {
		return // it never beat, and now never will
	}
	h.timed = true
	h.mu.Lock()
	h.stopped = true
	if h.timer != nil {
		h.timer.Stop()
	}
	h.mu.Unlock()
	h.beating.Wait()
}

func (h *heartbeat) beat() {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	h.beating.Add(1)
	defer h.beating.Done()
	now := h.clock.Now()
	var pending, expired []int
	for i := range h.entries {
		e := &h.entries[i]
		switch {
		case e.done:
		case !now.Before(h.giveUp(e)):
			expired = append(expired, i)
		default:
			pending = append(pending, i)
		}
	}
	h.mu.Unlock()

	for _, i := range expired {
		h.lose(i, "dedup: lease not confirmed before it ended; cancelling the handler, another delivery may take the key over")
	}
	h.extendAll(pending)

	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.stopped {
		h.timer = h.clock.AfterFunc(h.next(), h.beat)
	}
}

// next is the delay until the next beat: a third of the lease, or sooner
// when an unconfirmed lease ends before that. Under h.mu.
func (h *heartbeat) next() time.Duration {
	d := h.interval
	now := h.clock.Now()
	for i := range h.entries {
		e := &h.entries[i]
		if !e.done {
			d = min(d, max(h.giveUp(e).Sub(now), 0))
		}
	}
	return d
}

// lose marks claim i lost and cancels its handler with ErrLeaseLost.
func (h *heartbeat) lose(i int, why string) {
	h.mu.Lock()
	e := &h.entries[i]
	e.lost, e.done = true, true
	hctx := e.hctx
	h.mu.Unlock()
	h.logger.Warn(why, slog.String("key", e.key))
	if hctx != nil {
		hctx.lose()
	}
}

// extendAll extends the pending claims: in one round trip when there are
// several and the store can batch, one by one otherwise.
func (h *heartbeat) extendAll(pending []int) {
	if len(pending) == 0 {
		return
	}
	// The extension must not die with the caller's context (a shutdown
	// lets handlers finish), but must not outlast the next beat either.
	ctx, cancel := context.WithTimeout(detached(h.parent), h.interval)
	defer cancel()
	sent := h.clock.Now()
	if len(pending) > 1 && h.batcher != nil {
		reqs := make([]store.ExtendRequest, len(pending))
		for k, i := range pending {
			e := &h.entries[i]
			reqs[k] = store.ExtendRequest{Key: e.key, Token: e.token, Lease: h.lease}
		}
		errs := h.batcher.ExtendBatch(ctx, reqs)
		for k, i := range pending {
			err := errors.New("dedup: ExtendBatch returned too few errors")
			if k < len(errs) {
				err = errs[k]
			}
			h.extended(ctx, i, sent, err)
		}
		return
	}
	for _, i := range pending {
		e := &h.entries[i]
		h.extended(ctx, i, sent, h.store.Extend(ctx, store.ExtendRequest{Key: e.key, Token: e.token, Lease: h.lease}))
	}
}

// extended acts on the outcome of claim i's extension, sent at sent.
// entries[i].key, token and beat never change after start, so they are
// read without the lock.
func (h *heartbeat) extended(ctx context.Context, i int, sent time.Time, err error) {
	e := &h.entries[i]
	switch {
	case errors.Is(err, store.ErrLeaseLost):
		h.lose(i, "dedup: lease lost while the handler runs; cancelling it")
		return
	case err != nil:
		// Keep trying at the next beat: the lease may survive a short
		// outage, until its confirmed end.
		h.logger.Warn("dedup: lease extension failed", slog.String("key", e.key), slog.Any("error", err))
		return
	}
	h.mu.Lock()
	e.confirmed = sent
	h.mu.Unlock()
	if e.beat != nil {
		if err := callBeat(ctx, e.beat); err != nil {
			h.logger.Warn("dedup: message heartbeat failed", slog.String("key", e.key), slog.Any("error", err))
		}
	}
}

// callBeat calls a message's Heartbeat, which runs on the heartbeat's
// timer goroutine: a panic there would kill the process, so it is an error.
func callBeat(ctx context.Context, beat heartbeater) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Func: "Heartbeat", Value: p, Stack: debug.Stack()}
		}
	}()
	return beat.Heartbeat(ctx)
}
