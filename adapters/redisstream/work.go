package dedupredisstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
)

// handle runs one entry through the receiver and settles it: one delivery,
// reported to the receiver's Observer once it is settled.
func (c *Consumer[T, R]) handle(ctx context.Context, e *entry) {
	c.stats.delivered.Add(1)
	env := c.message(e)
	var dlv adapter.Delivery[R]
	if err := adapter.DecodeBody(c.opts.Decoder, env); err != nil {
		dlv = c.rcv.Refused(ctx, env, err)
	} else {
		dlv = c.rcv.Deliver(ctx, env)
	}
	c.settle(e, env, &dlv)
}

// settle carries out the delivery's decision (XACK; a retry kept pending;
// a dead letter, then XACK; XACK alone under DropPoison) and settles it
// with what was done, how long it took and what failed. It runs under the
// delivery's context, bounded by SettleTimeout but not cancelled with the
// handler.
func (c *Consumer[T, R]) settle(e *entry, env *dedup.Message[T], dlv *adapter.Delivery[R]) {
	d := dlv.Decision
	ctx, cancel := context.WithTimeout(context.WithoutCancel(dlv.Context()), c.opts.SettleTimeout)
	defer cancel()
	begin := time.Now()
	var err error
	drop := false
	switch {
	case d.Action == delivery.Ack:
		err = c.ack(ctx, e)
	case d.Action == delivery.Retry:
		err = c.retry(ctx, e, max(d.Delay, c.opts.MinRetryDelay))
	case d.Action == delivery.DeadLetter && c.opts.DeadLetterStream == "": // DropPoison
		drop = true
		err = c.ack(ctx, e)
	case d.Action == delivery.DeadLetter:
		err = c.deadLetter(ctx, e, env, dlv, d)
	}
	took := time.Since(begin)
	if err != nil {
		c.opts.Logger.WarnContext(ctx, "dedupredisstream: settling an entry failed; it stays pending and is tried again",
			slog.String("action", d.Action.String()), slog.String("stream", c.stream), slog.String("id", e.id), slog.Any("error", err))
		err = fmt.Errorf("dedupredisstream: %s %s %s: %w", d.Action, c.stream, e.id, err)
	}
	if drop {
		if err == nil {
			c.opts.Logger.ErrorContext(ctx, "dedupredisstream: poison entry dropped (DropPoison, no DeadLetterStream)",
				slog.String("reason", string(d.Reason)), slog.String("stream", c.stream), slog.String("id", e.id),
				slog.String("key", dlv.Result.Key), slog.Any("error", d.Err))
		}
		d = delivery.Decision{Action: delivery.Ack, Reason: d.Reason, Err: d.Err}
	}
	c.stats.count(d, drop, err)
	dlv.Settled(adapter.Settlement{Decision: d, Duration: took, Err: err})
}

// ack acknowledges e (and forgets its next-attempt time, if it may have
// one). When the XACK fails, e stays pending and is handed over again
// after the receiver's StoreRetryDelay, a duplicate then.
func (c *Consumer[T, R]) ack(ctx context.Context, e *entry) error {
	var err error
	if e.retried {
		_, err = c.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.XAck(ctx, c.stream, c.group, e.id)
			p.HDel(ctx, c.retryKey, e.id)
			return nil
		})
	} else {
		err = c.client.XAck(ctx, c.stream, c.group, e.id).Err()
	}
	if err != nil {
		c.later(e, c.rcv.StoreRetryDelay())
		return err
	}
	c.held.remove(e.id)
	return nil
}

// dueMilli returns t in Unix milliseconds, rounded up: the next-attempt
// time is recorded to the millisecond, and a consumer that takes the entry
// over must not run it before the delay (rounded down, it could, by up to
// a millisecond).
func dueMilli(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.After(time.UnixMilli(ms)) {
		ms++
	}
	return ms
}

// retry keeps e pending and hands it over again once delay has passed.
// The next-attempt time is recorded in Redis first (a hash of the group's,
// by entry id), so that a consumer that takes e over after this one died
// waits for it too; meanwhile this consumer keeps e from going idle, so
// nobody takes it over while it lives.
func (c *Consumer[T, R]) retry(ctx context.Context, e *entry, delay time.Duration) error {
	due := time.Now().Add(delay)
	_, err := c.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, c.retryKey, e.id, strconv.FormatInt(dueMilli(due), 10))
		p.PExpire(ctx, c.retryKey, c.rcv.Retention())
		return nil
	})
	e.retried = true
	e.due = due
	c.sched.add(e)
	if err != nil {
		return fmt.Errorf("record the next attempt's time: %w", err)
	}
	return nil
}

// later hands e over again after delay, without recording a time: what a
// failed XACK or dead letter waits.
func (c *Consumer[T, R]) later(e *entry, delay time.Duration) {
	e.due = time.Now().Add(delay)
	c.sched.add(e)
}

// deadLetter adds the dead letter (the original's fields, then the Dedup-*
// fields), then acknowledges the original: in that order, so that a crash
// between the two leaves the original pending, dead-lettered again later
// (a second letter carrying the same original id, which redrive
// deduplicates by the key's record). When the XADD fails, the original is
// handed over again after the receiver's StoreRetryDelay.
func (c *Consumer[T, R]) deadLetter(ctx context.Context, e *entry, env *dedup.Message[T], dlv *adapter.Delivery[R], d delivery.Decision) error {
	values := c.deadLetterFields(ctx, e, env, dlv, d)
	if err := c.client.XAdd(ctx, &redis.XAddArgs{Stream: c.opts.DeadLetterStream, Values: values}).Err(); err != nil {
		c.later(e, c.rcv.StoreRetryDelay())
		return fmt.Errorf("%w to %q: %w", ErrDeadLetter, c.opts.DeadLetterStream, err)
	}
	return c.ack(ctx, e)
}

// deadLetterFields are the dead letter's fields: the original's (but its
// Dedup-* fields and trace context, which the letter's own replace), then
// what package delivery names.
func (c *Consumer[T, R]) deadLetterFields(ctx context.Context, e *entry, env *dedup.Message[T], dlv *adapter.Delivery[R], d delivery.Decision) []any {
	own := map[string]string{}
	c.rcv.Inject(ctx, func(k, v string) { own[k] = v })
	own[delivery.HeaderReason] = string(d.Reason)
	if d.Err != nil {
		own[delivery.HeaderError] = oneLine(d.Err.Error())
	}
	if k := dlv.Result.Key; k != "" {
		own[delivery.HeaderKey] = oneLine(k)
	}
	if a := dlv.Result.Attempt; a > 0 {
		own[delivery.HeaderAttempt] = strconv.Itoa(a)
	}
	own[delivery.HeaderSource] = c.stream
	own[delivery.HeaderStream] = c.stream
	own[delivery.HeaderConsumerGroup] = c.group
	own[delivery.HeaderOffset] = e.id
	if e.count > 0 {
		own[delivery.HeaderDeliveryCount] = strconv.Itoa(e.count)
	}
	if env.ID != "" {
		own[delivery.HeaderOriginalMessageID] = env.ID
	}
	own[delivery.HeaderDeadLetteredAt] = time.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00")
	values := make([]any, 0, 2*(len(own)+len(env.Data)))
	if e.fields != nil {
		for i, n := range e.fields.names {
			if _, mine := own[n]; mine || strings.HasPrefix(n, "Dedup-") {
				continue
			}
			values = append(values, n, e.fields.values[i])
		}
	}
	for k, v := range own {
		values = append(values, k, v)
	}
	return values
}

// oneLine keeps a field's value on one line and bounded: a panic's stack
// does not belong in a dead letter's reason.
func oneLine(s string) string {
	const limit = 1024
	s = strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
	if len(s) > limit {
		s = s[:limit]
	}
	return s
}

// reportTrimmed reports entries deleted from the stream while pending,
// before they were handled here: each is logged at error level by id,
// counted in Stats().Trimmed, and heard by the Observer as an event whose
// Err is ErrTrimmed. how says how it was found.
func (c *Consumer[T, R]) reportTrimmed(ctx context.Context, ids []string, how string) {
	for _, id := range ids {
		c.held.remove(id)
		c.stats.trimmed.Add(1)
		c.opts.Logger.ErrorContext(ctx, "dedupredisstream: a pending entry was deleted from the stream (trimmed) before it was handled: it is lost",
			slog.String("stream", c.stream), slog.String("group", c.group), slog.String("id", id), slog.String("found", how))
		err := fmt.Errorf("%w: %s %s (%s)", ErrTrimmed, c.stream, id, how)
		c.rcv.Observe(ctx, delivery.Event{
			Origin: delivery.Origin{Broker: BrokerRedisStream, Source: c.stream, Stream: c.stream,
				Header: delivery.MapHeader{delivery.HeaderOffset: {id}}},
			Namespace: c.rcv.Namespace(),
			Decision:  delivery.Decision{Action: delivery.Ack, Reason: ReasonTrimmed, Err: err},
			Err:       err,
			Settled:   true,
		})
	}
	if len(ids) > 0 {
		if err := c.client.HDel(ctx, c.retryKey, ids...).Err(); err != nil && !errors.Is(err, redis.Nil) {
			c.opts.Logger.DebugContext(ctx, "dedupredisstream: next-attempt times of trimmed entries not removed", slog.Any("error", err))
		}
	}
}
