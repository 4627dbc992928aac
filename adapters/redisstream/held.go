package dedupredisstream

import (
	"container/heap"
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// heldSet is the ids of the entries this consumer holds: queued for a
// worker, in a handler, or waiting for a retry's delay. maintain keeps
// them from going idle, so that no other consumer takes them over.
type heldSet struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

// add adds id, and reports whether it was not held yet.
func (h *heldSet) add(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ids == nil {
		h.ids = map[string]struct{}{}
	}
	if _, ok := h.ids[id]; ok {
		return false
	}
	h.ids[id] = struct{}{}
	return true
}

func (h *heldSet) remove(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.ids, id)
}

func (h *heldSet) has(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.ids[id]
	return ok
}

func (h *heldSet) snapshot() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.ids))
	for id := range h.ids {
		out = append(out, id)
	}
	return out
}

// scheduler holds the entries to be handed over at a time of their own (a
// retry's delay) or checked before they are (taken over from another
// consumer, pending since an earlier run).
type scheduler struct {
	mu   sync.Mutex
	h    entryHeap
	wake chan struct{}
}

func (s *scheduler) init() { s.wake = make(chan struct{}, 1) }

func (s *scheduler) add(e *entry) {
	s.mu.Lock()
	heap.Push(&s.h, e)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// due pops the entries due at now, at most n; it returns when the next one
// is due otherwise (zero for none).
func (s *scheduler) due(now time.Time, n int) ([]*entry, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*entry
	for len(s.h) > 0 && len(out) < n {
		if s.h[0].due.After(now) {
			return out, s.h[0].due
		}
		out = append(out, heap.Pop(&s.h).(*entry))
	}
	if len(s.h) > 0 {
		return out, now
	}
	return out, time.Time{}
}

type entryHeap []*entry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h entryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *entryHeap) Push(x any)        { *h = append(*h, x.(*entry)) }
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}

// schedule hands the scheduler's entries over as they come due, until ctx
// ends; what it still holds then stays pending in the group.
func (c *Consumer[T, R]) schedule(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		batch, next := c.sched.due(time.Now(), c.opts.Batch)
		if len(batch) > 0 {
			c.takeUp(ctx, batch)
			if ctx.Err() != nil {
				return
			}
			continue
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = time.Until(next)
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-c.sched.wake:
			if !timer.Stop() {
				<-timer.C
			}
		case <-ctx.Done():
			return
		}
	}
}

// takeUp checks, in one round trip, what became of entries not read as
// new: whether each is still pending (XPENDING), still in the stream
// (XRANGE), and when its next attempt is due (the group's hash of
// next-attempt times), and takes them all for this consumer (XCLAIM
// JUSTID, which resets their idle time without counting a delivery, and
// drops from the group's pending list those deleted from the stream).
// Then: an entry no longer pending but still in the stream was
// acknowledged by another consumer (dropped); one no longer in the stream
// was deleted before it was handled (reported, ErrTrimmed); one whose next
// attempt is later waits for it; the others go to the workers.
func (c *Consumer[T, R]) takeUp(ctx context.Context, batch []*entry) {
	ids := make([]string, len(batch))
	for i, e := range batch {
		ids[i] = e.id
	}
	pending := make([]*redis.XPendingExtCmd, len(batch))
	ranges := make([]*redis.XMessageSliceCmd, len(batch))
	var dues *redis.SliceCmd
	_, err := c.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			pending[i] = p.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: c.stream, Group: c.group, Start: id, End: id, Count: 1})
			ranges[i] = p.XRange(ctx, c.stream, id, id)
		}
		dues = p.HMGet(ctx, c.retryKey, ids...)
		p.XClaimJustID(ctx, &redis.XClaimArgs{Stream: c.stream, Group: c.group, Consumer: c.opts.Consumer, Messages: ids})
		return nil
	})
	if err != nil && !isNil(err) {
		if ctx.Err() != nil {
			return
		}
		c.opts.Logger.WarnContext(ctx, "dedupredisstream: pending entries not checked; trying again", slog.Int("entries", len(batch)), slog.Any("error", err))
		for _, e := range batch {
			c.later(e, c.rcv.StoreRetryDelay())
		}
		return
	}
	now := time.Now()
	var trimmed []string
	for i, e := range batch {
		p, _ := pending[i].Result()
		r, _ := ranges[i].Result()
		switch {
		case len(r) == 0:
			trimmed = append(trimmed, e.id)
			continue
		case len(p) == 0:
			c.held.remove(e.id) // acknowledged by another consumer
			continue
		}
		e.values, e.fields = r[0].Values, fieldsOf(r[0].Values)
		e.count = max(int(p[0].RetryCount), e.count+1)
		if v, ok := dues.Val()[i].(string); ok {
			e.retried = true
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil && time.UnixMilli(ms).After(now) {
				e.due = time.UnixMilli(ms)
				c.sched.add(e)
				continue
			}
		}
		if !c.dispatch(ctx, e) {
			return
		}
	}
	c.reportTrimmed(ctx, trimmed, "XRANGE after the entry was pending")
}

func isNil(err error) bool { return err == redis.Nil }
