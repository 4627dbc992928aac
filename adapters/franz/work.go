package dedupfranz

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
)

// item is one fetched message on its way to an outcome.
type item[T, R any] struct {
	msg       *kgo.Record
	idx       int // in its batch
	env       *dedup.Message[T]
	decodeErr error
	dlv       *adapter.Delivery[R] // the delivery being settled (delivery); nil before it is handed over and once settled
	delivery  adapter.Delivery[R]
	res       dedup.Result[R]
	err       error
	dead      *delivery.Decision // decided to dead-letter, the write not done yet
	later     *delivery.Decision // decided to send to a retry topic, the write not done yet
	tier      time.Duration      // later's tier
	from      origin
	firstFail time.Time
	writing   time.Time // when the first write of the dead letter or retry copy began
	writeErr  error     // why the last write of the dead letter or retry copy failed
	done      bool
}

// worker is what a partition's worker reuses from batch to batch, so that
// handling a message allocates nothing of the worker's own but its
// envelope (which the handler may keep).
type worker[T, R any] struct {
	batch   []*kgo.Record
	items   []item[T, R]
	pending []*item[T, R]
	past    []passed[T, R]
	envs    []*dedup.Message[T]
	at      []*item[T, R]
}

// work is the worker of partition p: it handles the partition's records
// in fetch order, a batch at a time, until the consumer stops or p is
// revoked or lost.
func (c *Consumer[T, R]) work(ctx context.Context, p *partition) {
	w := &worker[T, R]{batch: make([]*kgo.Record, 0, c.opts.BatchSize)}
	for {
		batch := c.nextBatch(p, w.batch[:0])
		if batch == nil {
			return
		}
		c.process(ctx, p, w, batch)
		clear(batch) // the records are not kept past their batch
	}
}

// nextBatch waits for a record of p and returns it, appended to batch,
// with what else has been fetched for p, up to BatchSize, waiting at most
// Linger for more. It returns nil when the consumer stops or p is fenced:
// fetched records that were not started are left uncommitted, for the
// next owner.
func (c *Consumer[T, R]) nextBatch(p *partition, batch []*kgo.Record) []*kgo.Record {
	// Records already waiting are taken at once, without waiting for the
	// ready token (a token left behind makes one empty take later).
	batch = c.take(p, batch, c.opts.BatchSize)
	for len(batch) == 0 {
		select {
		case <-p.ready:
		case <-c.stopping:
			return nil
		case <-p.fenced:
			return nil
		}
		batch = c.take(p, batch, c.opts.BatchSize)
	}
	if len(batch) < c.opts.BatchSize && c.opts.Linger > 0 {
		t := time.NewTimer(c.opts.Linger)
		defer t.Stop()
	linger:
		for len(batch) < c.opts.BatchSize {
			select {
			case <-p.ready:
				batch = c.take(p, batch, c.opts.BatchSize-len(batch))
			case <-t.C:
				break linger
			case <-c.stopping:
				return nil
			case <-p.fenced:
				return nil
			}
		}
	}
	if c.stoppingNow() || !p.open() {
		return nil
	}
	c.stats.delivered.Add(uint64(len(batch)))
	return batch
}

// process takes a batch of p to outcomes: it hands the batch to the
// receiver, settles each message as Decide says, and hands the messages to
// retry back, in order, after the longest of their delays, until every
// message has an outcome or the consumer stops. The watermark moves past
// the batch's finished prefix after each round. Each handing over is one
// delivery, settled (reported to the Observer) once: a retry in place at
// once, a dead letter or retry copy once its write is acknowledged (or
// the consumer stops first), an ack once the watermark moved.
func (c *Consumer[T, R]) process(ctx context.Context, p *partition, w *worker[T, R], batch []*kgo.Record) {
	w.items = slices.Grow(w.items[:0], len(batch))[:len(batch)]
	items := w.items
	// The worker's next batch reuses the items: they keep no envelope or
	// delivery alive past their own.
	defer clear(items)
	pending := w.pending[:0]
	var notBefore time.Time
	for i, m := range batch {
		it := &items[i]
		it.msg, it.idx = m, i
		it.from = originOf(m)
		it.firstFail = it.from.firstFail
		it.env = envelope[T](m, c.opts.Fingerprint)
		if it.from.retry {
			retried(it.env, it.from)
			if it.from.notBefore.After(notBefore) {
				notBefore = it.from.notBefore
			}
		}
		it.decodeErr = adapter.DecodeBody(c.opts.Decoder, it.env)
		pending = append(pending, it)
	}
	w.pending = pending
	defer clear(w.pending)
	defer abandon(items)
	if !notBefore.IsZero() {
		if d := time.Until(notBefore); d > 0 && !c.wait(ctx, p, d) {
			// Stopping: the batch is left uncommitted, for the next owner.
			return
		}
	}
	for len(pending) > 0 {
		if !c.acquire(p) {
			return
		}
		c.handle(ctx, w, pending)
		<-c.sem
		var retry []*item[T, R]
		var delay time.Duration
		past := w.past[:0]
		for _, it := range pending {
			d, again, pass, passes := c.settle(it)
			if again {
				retry = append(retry, it)
				delay = max(delay, d)
			}
			if passes {
				past = append(past, passed[T, R]{it, pass})
			}
		}
		w.past = past
		last, commit, committed := c.advance(ctx, p, items)
		for i, ps := range past {
			past[i] = passed[T, R]{}
			s := adapter.Settlement{Decision: ps.decision}
			if committed && ps.it.idx <= last {
				s.Duration, s.Err = commit.took, commit.err
			}
			if ps.decision.Action == delivery.Ack && ps.it.dead == nil && s.Err == nil {
				c.stats.acked.Add(1)
			}
			if !p.open() {
				c.stats.stale.Add(1) // done, but p is no longer this member's to commit
			}
			ps.it.dlv.Settled(s)
			ps.it.dlv = nil
		}
		if len(retry) == 0 || !c.wait(ctx, p, max(delay, c.opts.MinRetryDelay)) {
			return
		}
		pending = retry
	}
}

// passed is an item the watermark may move past: acked, or poison
// dropped; decision is what was done.
type passed[T, R any] struct {
	it       *item[T, R]
	decision delivery.Decision
}

// abandon settles the deliveries of items still waiting for their dead
// letter or retry copy to be written when the consumer stops: not done,
// for the reason the last write failed. They stay uncommitted, for the
// next owner.
func abandon[T, R any](items []item[T, R]) {
	for i := range items {
		it := &items[i]
		if it.dlv == nil {
			continue
		}
		err := it.writeErr
		if err == nil {
			err = errStopped
		}
		it.dlv.Settled(adapter.Settlement{Duration: sinceOrZero(it.writing), Err: err})
		it.dlv = nil
	}
}

// errStopped is the settlement error of a delivery the consumer stopped
// before settling.
var errStopped = errors.New("dedupfranz: the consumer stopped first; left uncommitted for the next owner")

func sinceOrZero(t time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return time.Since(t)
}

// acquire takes a handling slot, and reports false when the consumer
// stops or p is fenced first. Once it returns true, p's delivery starts:
// a revoke that fenced p before waits for it (up to RevokeTimeout).
func (c *Consumer[T, R]) acquire(p *partition) bool {
	select { // at once when a slot is free: no select of three
	case c.sem <- struct{}{}:
	default:
		select {
		case c.sem <- struct{}{}:
		case <-c.stopping:
			return false
		case <-p.fenced:
			return false
		}
	}
	if c.stoppingNow() || !p.open() {
		<-c.sem
		return false
	}
	return true
}

// handle runs the pending messages through the receiver: one Deliver, or
// a DeliverBatch for several; a message that did not decode is Refused. A
// message whose dead letter or retry copy is still to be written does not
// reach the receiver again: its delivery is still being settled.
func (c *Consumer[T, R]) handle(ctx context.Context, w *worker[T, R], pending []*item[T, R]) {
	envs, at := w.envs[:0], w.at[:0]
	defer func() {
		clear(envs)
		clear(at)
		w.envs, w.at = envs[:0], at[:0]
	}()
	for _, it := range pending {
		switch {
		case it.dead != nil, it.later != nil:
		case it.decodeErr != nil:
			it.delivery = c.rcv.Refused(ctx, it.env, it.decodeErr)
			it.dlv, it.res, it.err = &it.delivery, dedup.Result[R]{}, it.decodeErr
		default:
			envs = append(envs, it.env)
			at = append(at, it)
		}
	}
	switch len(envs) {
	case 0:
	case 1:
		it := at[0]
		it.delivery = c.rcv.Deliver(ctx, envs[0])
		it.dlv, it.res, it.err = &it.delivery, it.delivery.Result, it.delivery.Err
	default:
		ds := c.rcv.DeliverBatch(ctx, envs)
		for i := range ds {
			at[i].dlv, at[i].res, at[i].err = &ds[i], ds[i].Result, ds[i].Err
		}
	}
}

// settle carries out the decision on it's delivery, and settles the
// delivery unless the watermark is to move past it (then it returns what
// was done, and passes: the caller settles it once the watermark moved).
// It reports whether it must be retried, after how long.
func (c *Consumer[T, R]) settle(it *item[T, R]) (retryAfter time.Duration, again bool, pass delivery.Decision, passes bool) {
	dlv := it.dlv
	var d delivery.Decision
	switch {
	case it.dead != nil:
		d = *it.dead
	case it.later != nil:
		d = *it.later
	default:
		d = dlv.Decision
		if tier, ok := tierFor(c.opts.RetryTopics, d); ok {
			later := d // a copy: d itself stays on the stack
			it.later, it.tier = &later, tier
		}
	}
	if d.Action != delivery.Ack && it.firstFail.IsZero() {
		it.firstFail = time.Now()
	}
	switch d.Action {
	case delivery.Ack:
		it.done = true
		return 0, false, d, true
	case delivery.Retry:
		if it.later == nil {
			c.stats.retriedInPlace.Add(1)
			dlv.Settled(adapter.Settlement{})
			it.dlv = nil
			return d.Delay, true, delivery.Decision{}, false
		}
		if !c.written(it, c.retryLater(dlv.Context(), it, d), &c.stats.retriedLater) {
			return c.rcv.StoreRetryDelay(), true, delivery.Decision{}, false
		}
	case delivery.DeadLetter:
		dead := d
		it.dead = &dead
		if c.opts.DropPoison {
			c.dropPoison(dlv.Context(), it, d)
			it.done = true
			return 0, false, delivery.Decision{Action: delivery.Ack, Reason: d.Reason, Err: d.Err}, true
		}
		if !c.written(it, c.deadLetter(dlv.Context(), it, d), &c.stats.deadLettered) {
			return c.rcv.StoreRetryDelay(), true, delivery.Decision{}, false
		}
	}
	return 0, false, delivery.Decision{}, false
}

// written settles the delivery of it once its dead letter or retry copy
// was written (write is the write's error, timed from it.writing), and
// reports whether it was. A failed write leaves the delivery unsettled:
// the write is tried again after the receiver's StoreRetryDelay, without
// handing the message to the receiver again.
func (c *Consumer[T, R]) written(it *item[T, R], write func() error, count *atomic.Uint64) bool {
	if it.writing.IsZero() {
		it.writing = time.Now()
	}
	if err := write(); err != nil {
		c.stats.settleFailures.Add(1)
		it.writeErr = err
		return false
	}
	count.Add(1)
	it.done = true
	it.dlv.Settled(adapter.Settlement{Duration: time.Since(it.writing)})
	it.dlv = nil
	return true
}

// dropPoison logs it, poison, at error level and counts it: under
// DropPoison it is committed past without a dead letter.
func (c *Consumer[T, R]) dropPoison(ctx context.Context, it *item[T, R], d delivery.Decision) {
	m := it.msg
	c.stats.poisonDropped.Add(1)
	c.opts.Logger.ErrorContext(ctx, "dedupfranz: poison message dropped (DropPoison): committed past without a dead letter",
		slog.String("reason", string(d.Reason)), slog.String("topic", m.Topic), slog.Int("partition", int(m.Partition)),
		slog.Int64("offset", m.Offset), slog.Any("error", d.Err))
}

// deadLetter returns the write of it to the dead-letter topic, which
// waits for the write to be acknowledged. ctx is the delivery's: the dead
// letter carries its trace context.
func (c *Consumer[T, R]) deadLetter(ctx context.Context, it *item[T, R], d delivery.Decision) func() error {
	return func() error {
		m := it.msg
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.SettleTimeout)
		defer cancel()
		err := writeDeadLetter(sctx, c.client, c.opts.DeadLetterTopic, deadLetter{
			msg: m, from: it.from, group: c.group, reason: d.Reason, err: d.Err, key: it.res.Key, attempt: attemptOf(it, d), firstFail: it.firstFail,
			trace: c.tracer(ctx),
		})
		if err != nil {
			c.opts.Logger.WarnContext(ctx, "dedupfranz: dead-letter write failed; the message is retried in place",
				slog.String("topic", m.Topic), slog.Int("partition", int(m.Partition)), slog.Int64("offset", m.Offset), slog.Any("error", err))
		}
		return err
	}
}

// retryLater returns the write of it to the retry topic of its tier, due
// a tier from now, which waits for the write to be acknowledged. ctx is
// the delivery's: the copy carries its trace context.
func (c *Consumer[T, R]) retryLater(ctx context.Context, it *item[T, R], d delivery.Decision) func() error {
	return func() error {
		topic := adapter.RetryName(retryBase(it.from.topic, c.opts.RetryTopics), it.tier)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.SettleTimeout)
		defer cancel()
		err := writeRetry(sctx, c.client, topic, retryLetter{
			msg: it.msg, from: it.from, group: c.group, reason: d.Reason, err: d.Err,
			attempt: attemptOf(it, d), firstFail: it.firstFail, notBefore: time.Now().Add(it.tier),
			trace: c.tracer(ctx),
		})
		if err != nil {
			m := it.msg
			c.opts.Logger.WarnContext(ctx, "dedupfranz: retry-topic write failed; tried again in place",
				slog.String("topic", m.Topic), slog.Int("partition", int(m.Partition)), slog.Int64("offset", m.Offset), slog.Any("error", err))
		}
		return err
	}
}

// tracer returns what writes the trace context of ctx, a delivery's, into
// a message's headers: the receiver's Observer, when it is a
// delivery.Injector.
func (c *Consumer[T, R]) tracer(ctx context.Context) func(set func(key, value string)) {
	return func(set func(key, value string)) { c.rcv.Inject(ctx, set) }
}

// attemptOf is the attempt a decision on it was taken after.
func attemptOf[T, R any](it *item[T, R], d delivery.Decision) int {
	attempt := it.res.Attempt
	var he *dedup.HandlerError
	if errors.As(d.Err, &he) && he.Attempt > attempt {
		attempt = he.Attempt
	}
	return attempt
}

// commitResult is what the commit made at once after a watermark moved
// (CommitEveryOutcome) came to.
type commitResult struct {
	took time.Duration
	err  error
}

// advance moves p's watermark past the longest finished prefix of items,
// and commits it at once under CommitEveryOutcome. It returns the index of
// the prefix's last item (-1 for none), and what the commit came to when
// one was made (committed).
func (c *Consumer[T, R]) advance(ctx context.Context, p *partition, items []item[T, R]) (last int, commit commitResult, committed bool) {
	last = -1
	for i := range items {
		if !items[i].done {
			break
		}
		last = i
	}
	if last < 0 {
		return last, commitResult{}, false
	}
	move := p.setMark(items[last].msg)
	if c.opts.CommitInterval != CommitEveryOutcome {
		return last, commitResult{}, false
	}
	// The partitions that moved while the previous commit was on its way go
	// out together (a group commit). A failure is logged, and retried by the
	// ticker.
	begin := time.Now()
	err := c.committer.commitMark(ctx, p, move)
	return last, commitResult{took: time.Since(begin), err: err}, true
}

// wait waits d before a retry, and reports false when the consumer stops
// or p is fenced first: a revoke never waits for a retry's delay.
func (c *Consumer[T, R]) wait(ctx context.Context, p *partition, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return !c.stoppingNow() && p.open()
	case <-c.stopping:
		return false
	case <-p.fenced:
		return false
	case <-ctx.Done():
		return false
	}
}
