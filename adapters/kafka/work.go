package dedupkafka

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dedup-go/dedup"
)

// item is one fetched message on its way to an outcome.
type item[T, R any] struct {
	msg       kafka.Message
	env       *dedup.Message[T]
	decodeErr error
	res       dedup.Result[R]
	err       error
	dead      *dedup.Decision // decided to dead-letter, the write not done yet
	later     *dedup.Decision // decided to send to a retry topic, the write not done yet
	tier      time.Duration   // later's tier
	from      origin
	firstFail time.Time
	done      bool
}

// work is the worker of partition p: it handles the partition's messages
// in fetch order, a batch at a time, until the consumer stops.
func (c *Consumer[T, R]) work(ctx context.Context, p *partition) {
	for {
		batch := c.nextBatch(p)
		if batch == nil {
			return
		}
		c.process(ctx, p, batch)
	}
}

// nextBatch waits for a message of p and returns it with what else has been
// fetched for p, up to BatchSize, waiting at most Linger for more. It
// returns nil when the consumer stops: fetched messages that were not
// started are left uncommitted, for the next owner.
func (c *Consumer[T, R]) nextBatch(p *partition) []kafka.Message {
	var first kafka.Message
	select {
	case first = <-p.queue:
	case <-c.stopping:
		return nil
	}
	batch := make([]kafka.Message, 1, c.opts.BatchSize)
	batch[0] = first
fill:
	for len(batch) < c.opts.BatchSize {
		select {
		case m := <-p.queue:
			batch = append(batch, m)
		default:
			break fill
		}
	}
	if len(batch) < c.opts.BatchSize && c.opts.Linger > 0 {
		t := time.NewTimer(c.opts.Linger)
		defer t.Stop()
	linger:
		for len(batch) < c.opts.BatchSize {
			select {
			case m := <-p.queue:
				batch = append(batch, m)
			case <-t.C:
				break linger
			case <-c.stopping:
				return nil
			}
		}
	}
	if c.stoppingNow() {
		return nil
	}
	return batch
}

// process takes a batch of p to outcomes: it hands the batch to the
// receiver, settles each message as Decide says, and hands the messages to
// retry back, in order, after the longest of their delays, until every
// message has an outcome or the consumer stops. The watermark moves past
// the batch's finished prefix after each round.
func (c *Consumer[T, R]) process(ctx context.Context, p *partition, batch []kafka.Message) {
	items := make([]item[T, R], len(batch))
	pending := make([]*item[T, R], len(batch))
	var notBefore time.Time
	for i, m := range batch {
		it := &items[i]
		it.msg = m
		it.from = originOf(m)
		it.firstFail = it.from.firstFail
		it.env = envelope[T](m, c.opts.Fingerprint)
		if it.from.retry {
			retried(it.env, it.from)
			if it.from.notBefore.After(notBefore) {
				notBefore = it.from.notBefore
			}
		}
		it.decodeErr = dedup.DecodeBody(c.opts.Decoder, it.env)
		pending[i] = it
	}
	if d := time.Until(notBefore); d > 0 && !c.wait(ctx, d) {
		// Stopping: the batch is left uncommitted, for the next owner.
		return
	}
	for len(pending) > 0 {
		if !c.acquire() {
			return
		}
		c.handle(ctx, pending)
		<-c.sem
		var retry []*item[T, R]
		var delay time.Duration
		for _, it := range pending {
			if d, again := c.settle(ctx, it); again {
				retry = append(retry, it)
				delay = max(delay, d)
			}
		}
		c.advance(p, items)
		if len(retry) == 0 || !c.wait(ctx, max(delay, c.opts.MinRetryDelay)) {
			return
		}
		pending = retry
	}
}

// acquire takes a handling slot, and reports false when the consumer stops
// first.
func (c *Consumer[T, R]) acquire() bool {
	select {
	case c.sem <- struct{}{}:
	case <-c.stopping:
		return false
	}
	if c.stoppingNow() {
		<-c.sem
		return false
	}
	return true
}

// handle runs the pending messages through the receiver: one Handle, or a
// HandleBatch for several. A message that did not decode, or whose dead
// letter is still to be written, does not reach the receiver again.
func (c *Consumer[T, R]) handle(ctx context.Context, pending []*item[T, R]) {
	var envs []*dedup.Message[T]
	var at []*item[T, R]
	for _, it := range pending {
		switch {
		case it.dead != nil, it.later != nil:
		case it.decodeErr != nil:
			it.res, it.err = dedup.Result[R]{}, it.decodeErr
		default:
			envs = append(envs, it.env)
			at = append(at, it)
		}
	}
	switch len(envs) {
	case 0:
	case 1:
		at[0].res, at[0].err = c.rcv.Handle(ctx, envs[0])
	default:
		for i, o := range c.rcv.HandleBatch(ctx, envs) {
			at[i].res, at[i].err = o.Result, o.Err
		}
	}
}

// settle carries out the decision on it. It reports whether it must be
// retried, after how long.
func (c *Consumer[T, R]) settle(ctx context.Context, it *item[T, R]) (time.Duration, bool) {
	var d dedup.Decision
	switch {
	case it.dead != nil:
		d = *it.dead
	case it.later != nil:
		d = *it.later
	default:
		d = c.rcv.Decide(it.res, it.err)
		if tier, ok := tierFor(c.opts.RetryTopics, d); ok {
			it.later, it.tier = &d, tier
		}
	}
	if d.Action != dedup.Ack && it.firstFail.IsZero() {
		it.firstFail = time.Now()
	}
	var serr error
	retryAfter, again := d.Delay, false
	switch d.Action {
	case dedup.Ack:
		it.done = true
	case dedup.Retry:
		if it.later == nil {
			again = true
		} else if serr = c.retryLater(ctx, it, d); serr != nil {
			retryAfter, again = c.rcv.StoreRetryDelay(), true
		} else {
			it.done = true
		}
	case dedup.DeadLetter:
		it.dead = &d
		if serr = c.deadLetter(ctx, it, d); serr != nil {
			retryAfter, again = c.rcv.StoreRetryDelay(), true
		} else {
			it.done = true
		}
	}
	settled(ctx, c.rcv, it.env, it.res, d, serr)
	return retryAfter, again
}

// deadLetter writes it to the dead-letter topic and waits for the write to
// be acknowledged; under DropPoison it logs the message at error level,
// counts it and lets it be committed past.
func (c *Consumer[T, R]) deadLetter(ctx context.Context, it *item[T, R], d dedup.Decision) error {
	m := it.msg
	if c.dlw == nil {
		c.poisonDropped.Add(1)
		c.opts.Logger.ErrorContext(ctx, "dedupkafka: poison message dropped (DropPoison): committed past without a dead letter",
			slog.String("reason", string(d.Reason)), slog.String("topic", m.Topic), slog.Int("partition", m.Partition),
			slog.Int64("offset", m.Offset), slog.Any("error", d.Err))
		return nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.SettleTimeout)
	defer cancel()
	err := writeDeadLetter(sctx, c.dlw, c.opts.DeadLetterTopic, deadLetter{
		msg: m, from: it.from, group: c.group, reason: d.Reason, err: d.Err, key: it.res.Key, attempt: attemptOf(it, d), firstFail: it.firstFail,
	})
	if err != nil {
		c.opts.Logger.WarnContext(ctx, "dedupkafka: dead-letter write failed; the message is retried in place",
			slog.String("topic", m.Topic), slog.Int("partition", m.Partition), slog.Int64("offset", m.Offset), slog.Any("error", err))
	}
	return err
}

// retryLater writes it to the retry topic of its tier, due a tier from
// now, and waits for the write to be acknowledged.
func (c *Consumer[T, R]) retryLater(ctx context.Context, it *item[T, R], d dedup.Decision) error {
	topic := RetryTopic(retryBase(it.from.topic, c.opts.RetryTopics), it.tier)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.SettleTimeout)
	defer cancel()
	err := writeRetry(sctx, c.rtw, topic, retryLetter{
		msg: it.msg, from: it.from, group: c.group, reason: d.Reason, err: d.Err,
		attempt: attemptOf(it, d), firstFail: it.firstFail, notBefore: time.Now().Add(it.tier),
	})
	if err != nil {
		m := it.msg
		c.opts.Logger.WarnContext(ctx, "dedupkafka: retry-topic write failed; tried again in place",
			slog.String("topic", m.Topic), slog.Int("partition", m.Partition), slog.Int64("offset", m.Offset), slog.Any("error", err))
	}
	return err
}

// attemptOf is the attempt a decision on it was taken after.
func attemptOf[T, R any](it *item[T, R], d dedup.Decision) int {
	attempt := it.res.Attempt
	var he *dedup.HandlerError
	if errors.As(d.Err, &he) && he.Attempt > attempt {
		attempt = he.Attempt
	}
	return attempt
}

// advance moves p's watermark past the longest finished prefix of items,
// and commits it at once under CommitEveryOutcome.
func (c *Consumer[T, R]) advance(p *partition, items []item[T, R]) {
	last := -1
	for i := range items {
		if !items[i].done {
			break
		}
		last = i
	}
	if last < 0 {
		return
	}
	p.setMark(items[last].msg)
	if c.opts.CommitInterval == CommitEveryOutcome {
		// Every partition's watermark: the partitions that moved while the
		// previous commit was on its way go out together (a group commit),
		// and find theirs already committed when their turn comes. A
		// failure is logged, and retried by the ticker.
		_ = c.committer.flush(nil)
	}
}

// wait waits d before a retry, and reports false when the consumer stops
// first.
func (c *Consumer[T, R]) wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return !c.stoppingNow()
	case <-c.stopping:
		return false
	case <-ctx.Done():
		return false
	}
}

// settled reports what was done with a delivery to the receiver's
// Observer: err is the error that kept the decision from being carried out,
// or else the one it was taken on.
func settled[T, R any](ctx context.Context, rcv *dedup.Receiver[*dedup.Message[T], R], env *dedup.Message[T], res dedup.Result[R], d dedup.Decision, err error) {
	if err == nil {
		err = d.Err
	}
	rcv.Observe(ctx, dedup.Event{
		Kind: dedup.EventSettled, Broker: env.Broker, Source: env.Source,
		MessageID: env.ID, Stream: env.Stream, Partition: env.Partition, Offset: env.Offset, DeliveryCount: env.DeliveryCount,
		Key: res.Key, Status: res.Status, Attempt: res.Attempt, Decision: d, Err: err, Problem: res.Problem,
	})
}
