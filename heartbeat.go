package dedup

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/dedup-go/dedup/clock"
)

// heartbeat extends the leases of claims whose handlers are still working.
// It arms one timer for a third of the lease, so a handler that finishes
// sooner costs a timer and nothing else: no goroutine per message. When the
// timer fires, it extends every unfinished claim, tells the broker (the
// message's Heartbeater) and arms itself again. A claim found lost has its
// handler's context cancelled with ErrLeaseLost as the cause.
type heartbeat struct {
	store    Store
	clock    clock.Clock
	lease    time.Duration
	interval time.Duration
	logger   *slog.Logger
	parent   context.Context // the caller's context, for its values

	mu      sync.Mutex
	stopped bool
	timer   clock.Timer
	beating sync.WaitGroup // a beat in progress, waited for by stop
	entries []heartbeatEntry
	one     [1]heartbeatEntry // backing array for the single-message case
}

type heartbeatEntry struct {
	key    string
	token  Token
	beat   func(context.Context) error
	cancel context.CancelCauseFunc // set while the handler runs
	done   bool                    // finished: no more extensions
	lost   bool                    // the store said ErrLeaseLost
}

func (r *Receiver[M, R]) newHeartbeat(ctx context.Context) *heartbeat {
	h := &heartbeat{
		store:    r.store,
		clock:    r.cfg.Clock,
		lease:    r.cfg.Lease,
		interval: r.cfg.Lease / 3,
		logger:   r.cfg.Logger,
		parent:   ctx,
	}
	h.entries = h.one[:0]
	return h
}

// add registers a claim before start and returns its index.
func (h *heartbeat) add(key string, token Token, beat func(context.Context) error) int {
	h.entries = append(h.entries, heartbeatEntry{key: key, token: token, beat: beat})
	return len(h.entries) - 1
}

// start arms the first beat.
func (h *heartbeat) start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.timer = h.clock.AfterFunc(h.interval, h.beat)
}

// running records that claim i's handler starts, with the cancel function
// of its context. It reports false when the claim was already lost.
func (h *heartbeat) running(i int, cancel context.CancelCauseFunc) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.entries[i].cancel = cancel
	return !h.entries[i].lost
}

// finish stops extending claim i.
func (h *heartbeat) finish(i int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.entries[i].done = true
	h.entries[i].cancel = nil
}

// stop stops the timer and waits for a beat in progress, so that no
// extension runs after the caller completes or releases its claims.
func (h *heartbeat) stop() {
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
	var pending []int
	for i, e := range h.entries {
		if !e.done {
			pending = append(pending, i)
		}
	}
	h.mu.Unlock()

	for _, i := range pending {
		h.extend(i)
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.stopped {
		h.timer = h.clock.AfterFunc(h.interval, h.beat)
	}
}

// extend extends claim i once. entries[i].key, token and beat never change
// after start, so they are read without the lock.
func (h *heartbeat) extend(i int) {
	e := &h.entries[i]
	// The extension must not die with the caller's context (a shutdown
	// lets handlers finish), but must not outlast the next beat either.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.parent), h.interval)
	defer cancel()
	err := h.store.Extend(ctx, e.key, e.token, h.lease)
	switch {
	case errors.Is(err, ErrLeaseLost):
		h.mu.Lock()
		e.lost, e.done = true, true
		stop := e.cancel
		h.mu.Unlock()
		h.logger.Warn("dedup: lease lost while the handler runs; cancelling it", slog.String("key", e.key))
		if stop != nil {
			stop(ErrLeaseLost)
		}
		return
	case err != nil:
		// Keep trying at the next beat: the lease may survive a short outage.
		h.logger.Warn("dedup: lease extension failed", slog.String("key", e.key), slog.Any("error", err))
		return
	}
	if e.beat != nil {
		if err := e.beat(ctx); err != nil {
			h.logger.Warn("dedup: message heartbeat failed", slog.String("key", e.key), slog.Any("error", err))
		}
	}
}
