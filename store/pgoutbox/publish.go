package pgoutbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dedup-go/dedup/outbox"
)

// maxCalls bounds the Publish calls a round has in flight at once.
const maxCalls = 16

// published is what a round's publishing left: the marks, and the
// messages not acknowledged (refused, unanswered, or held back behind an
// earlier message of their key that was), with the last error.
type published struct {
	marks   *marks
	failed  int
	lastErr error
}

// publishBatch publishes batch, a prefix of the unsent messages of each
// bucket in seq order, keeping each ordering key's order: a message is
// handed to the publisher only once its key's previous message in the
// batch was acknowledged, so no call holds two messages of one key.
// Within that, it keeps the publisher busy: up to maxCalls calls at once,
// of up to a batch of messages in all, and a key's next message goes out
// as soon as the call that carried its predecessor returns, not when a
// whole wave of keys is acknowledged.
//
// A message refused for good (outbox.ErrPermanent) is set aside as dead,
// and its key's next message goes on (unless RelayOptions.HoldRefused).
// Any other failure holds back the later messages of its key until a
// later round. A call that acknowledged nothing and failed as a whole, or
// at its deadline, stops the round from starting more (the broker is
// down or silent): the rest waits for a later round, after a backoff.
func (r *Relay) publishBatch(ctx context.Context, batch []pending) published {
	next := make([]int, len(batch)) // the next message of the same key, or -1
	last := map[string]int{}
	ready := make([]int, 0, len(batch))
	for i, p := range batch {
		next[i] = -1
		k := p.msg.OrderingKey
		if k == "" {
			ready = append(ready, i)
			continue
		}
		if j, ok := last[k]; ok {
			next[j] = i
		} else {
			ready = append(ready, i)
		}
		last[k] = i
	}
	behind := func(i int) int { // the messages of i's key after it
		n := 0
		for j := next[i]; j >= 0; j = next[j] {
			n++
		}
		return n
	}

	type result struct {
		idx      []int
		err      error
		deadline bool // the call's context ended before it returned
	}
	window := len(batch)
	chunk := max(1, (window+maxCalls-1)/maxCalls)
	results := make(chan result, maxCalls)
	var (
		out      = published{marks: &marks{}}
		calls    int
		inFlight int
		stopped  bool
	)
	for {
		for !stopped && len(ready) > 0 && calls < maxCalls && inFlight < window {
			n := min(len(ready), chunk, window-inFlight)
			idx := ready[:n:n]
			ready = ready[n:]
			calls++
			inFlight += n
			call := make([]outbox.Message, n)
			for j, i := range idx {
				call[j] = batch[i].msg
			}
			go func() {
				deadline, err := r.publish(ctx, call)
				results <- result{idx: idx, err: err, deadline: deadline}
			}()
		}
		if calls == 0 {
			break
		}
		res := <-results
		calls--
		inFlight -= len(res.idx)
		acked := outbox.Acknowledged(res.err, len(res.idx))
		var be *outbox.BatchError
		perMessage := errors.As(res.err, &be) && len(be.Errs) == len(res.idx)
		any := false
		for j, i := range res.idx {
			if acked[j] {
				any = true
				out.marks.acked = append(out.marks.acked, batch[i].seq)
				out.marks.oldest = max(out.marks.oldest, batch[i].age+time.Since(batch[i].read))
				if next[i] >= 0 {
					ready = append(ready, next[i])
				}
				continue
			}
			err := res.err
			if perMessage {
				err = be.Errs[j]
			}
			if err == nil {
				err = errors.New("pgoutbox: the publisher acknowledged the message neither way")
			}
			if errors.Is(err, outbox.ErrPermanent) && !r.cfg.holdRefused {
				any = true
				m := out.marks
				m.dead = append(m.dead, batch[i].seq)
				m.deadIDs = append(m.deadIDs, batch[i].msg.ID)
				m.deadErrs = append(m.deadErrs, err.Error())
				m.errs = append(m.errs, fmt.Errorf("message %s: %w", batch[i].msg.ID, err))
				if next[i] >= 0 {
					ready = append(ready, next[i])
				}
				continue
			}
			out.failed += 1 + behind(i)
			out.lastErr = err
		}
		if !any && (res.deadline || !perMessage) || ctx.Err() != nil {
			stopped = true
		}
	}
	for _, i := range ready {
		out.failed += 1 + behind(i)
	}
	if stopped && out.lastErr == nil {
		out.lastErr = ctx.Err()
	}
	return out
}

// publish calls the publisher, bounded by PublishTimeout, recovering a
// panic as an error. deadline reports that the call's context ended
// before it returned.
func (r *Relay) publish(ctx context.Context, msgs []outbox.Message) (deadline bool, err error) {
	pctx, cancel := context.WithTimeout(ctx, r.cfg.publishTimeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("pgoutbox: the publisher panicked: %v", p)
		}
		deadline = pctx.Err() != nil
	}()
	return false, r.pub.Publish(pctx, msgs)
}
