package dedupredisstream

import (
	"container/heap"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
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
// new, and takes them for this consumer: takeScript tells, for each, in
// one step, whether it is still pending (XPENDING) and still in the stream
// (XRANGE), takes it (XCLAIM JUSTID, which resets its idle time without
// counting a delivery) or drops one deleted from the stream from the
// pending list (so that exactly one consumer reports it); beside it, the
// group's hash of next-attempt times says when each is due. Then: an entry
// no longer pending was acknowledged by another consumer, or reported
// deleted by one (dropped); one deleted is reported (ErrTrimmed); one whose
// next attempt is later waits for it; the others go to the workers.
func (c *Consumer[T, R]) takeUp(ctx context.Context, batch []*entry) {
	ids := make([]string, len(batch))
	for i, e := range batch {
		ids[i] = e.id
	}
	var took *redis.Cmd
	var dues *redis.SliceCmd
	run := func(sha bool) error {
		_, err := c.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			took = takeScript.call(ctx, p, sha, c.stream, c.group, c.opts.Consumer, 0, true, ids)
			dues = p.HMGet(ctx, c.retryKey, ids...)
			return nil
		})
		return err
	}
	err := run(true)
	if isNoScript(err) {
		err = run(false)
	}
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
	states := parseTake(took.Val())
	now := time.Now()
	var trimmed []string
	for i, e := range batch {
		st := states[e.id]
		switch st.state {
		case takeDeleted:
			trimmed = append(trimmed, e.id)
			continue
		case takeHeld:
		default:
			c.held.remove(e.id) // acknowledged, or reported deleted, by another consumer
			continue
		}
		if st.values != nil {
			e.values, e.fields = st.values, fieldsOf(st.values)
		}
		e.count = max(st.count, e.count+1)
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
	c.reportTrimmed(ctx, trimmed, "deleted while pending")
}

func isNil(err error) bool { return errors.Is(err, redis.Nil) }

func isNoScript(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") }

// The states takeScript reports of an entry.
const (
	takeGone    = 0 // not pending any more
	takeHeld    = 1 // pending and in the stream: taken (when idle enough)
	takeDeleted = 2 // pending, deleted from the stream: dropped from the pending list
)

// takeScript: KEYS[1] the stream; ARGV: group, consumer, min idle (ms),
// "1" to return the entries' delivery counts and fields and to drop the
// deleted ones from the pending list (else they are left to the one that
// takes them up), then the ids.
// Each reply element is {id, state[, delivery count, fields]}.
var takeScript = script{redis.NewScript(`
local out = {}
for i = 5, #ARGV do
  local id = ARGV[i]
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)
  if #p == 0 then
    out[#out+1] = {id, 0}
  else
    local r = redis.call('XRANGE', KEYS[1], id, id)
    if #r == 0 then
      if ARGV[4] == '1' then redis.call('XACK', KEYS[1], ARGV[1], id) end
      out[#out+1] = {id, 2}
    else
      if p[1][3] >= tonumber(ARGV[3]) then
        redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id, 'JUSTID')
      end
      if ARGV[4] == '1' then
        out[#out+1] = {id, 1, p[1][4], r[1][2]}
      else
        out[#out+1] = {id, 1}
      end
    end
  end
end
return out
`)}

// script runs a Lua script in a pipeline, by its hash or its source.
type script struct{ *redis.Script }

func (s script) call(ctx context.Context, p redis.Pipeliner, sha bool, stream, group, consumer string, minIdle time.Duration, entries bool, ids []string) *redis.Cmd {
	args := make([]any, 0, 4+len(ids))
	flag := "0"
	if entries {
		flag = "1"
	}
	args = append(args, group, consumer, minIdle.Milliseconds(), flag)
	for _, id := range ids {
		args = append(args, id)
	}
	if sha {
		return s.EvalSha(ctx, p, []string{stream}, args...)
	}
	return s.Eval(ctx, p, []string{stream}, args...)
}

// taken is what takeScript says of one entry.
type taken struct {
	state  int
	count  int
	values map[string]any
}

func parseTake(v any) map[string]taken {
	out := map[string]taken{}
	rows, _ := v.([]any)
	for _, row := range rows {
		r, _ := row.([]any)
		if len(r) < 2 {
			continue
		}
		var t taken
		st, _ := r[1].(int64)
		t.state = int(st)
		if len(r) >= 4 {
			n, _ := r[2].(int64)
			t.count = int(n)
			if fv, ok := r[3].([]any); ok {
				t.values = make(map[string]any, len(fv)/2)
				for i := 0; i+1 < len(fv); i += 2 {
					t.values[toString(fv[i])] = toString(fv[i+1])
				}
			}
		}
		out[toString(r[0])] = t
	}
	return out
}
