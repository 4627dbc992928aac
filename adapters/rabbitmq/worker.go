package dedupamqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedup-go/dedup"
)

// worker handles deliveries one at a time. It owns a publishing channel
// for retries and dead letters, opened on its session's publishing
// connection on first use, so that its publishes are one at a time (see
// confirmChannel) without a lock shared with the other workers.
type worker[T, R any] struct {
	c      *Consumer[T, R]
	pub    *confirmChannel
	pubGen uint64 // the session pub belongs to
}

// run handles the deliveries of each session in turn until the consumer
// stops.
func (w *worker[T, R]) run() {
	defer w.closePub()
	var gen uint64
	for {
		s := w.c.nextSession(gen)
		if s == nil {
			return
		}
		gen = s.gen
		for it := range s.arrivals.(chan *delivered[T]) {
			if w.c.isStopping() {
				w.requeueUnhandled(s, &it.env, &it.d)
				continue
			}
			w.handle(s, it)
		}
		if !w.c.isStopping() {
			s.noteDrained()
		}
	}
}

// handle runs one delivery through the receiver and settles it. A
// delivery refused because the store is down or its key is in flight is
// held and handed to the receiver again in place (see heldInPlace) before
// it is settled.
func (w *worker[T, R]) handle(s *session, it *delivered[T]) {
	c := w.c
	env, d := &it.env, &it.d
	var (
		res dedup.Result[R]
		err error
	)
	if err = dedup.DecodeBody(c.opts.Decoder, env); err == nil {
		res, err = c.rcv.Handle(s.ctx, env)
	}
	dec := c.rcv.Decide(res, err)
	for w.heldInPlace(s, it, res, dec) {
		res, err = c.rcv.Handle(s.ctx, env)
		dec = c.rcv.Decide(res, err)
	}
	w.settled(s, env, res, dec, w.settle(s, d, env, res, dec))
}

// settled reports to the Observer what was done with a delivery: serr is
// the error that kept the decision from being carried out, else the one it
// was taken on.
func (w *worker[T, R]) settled(s *session, env *dedup.Message[T], res dedup.Result[R], dec dedup.Decision, serr error) {
	if serr == nil {
		serr = dec.Err
	}
	w.c.rcv.Observe(s.ctx, dedup.Event{
		Kind: dedup.EventSettled, Broker: BrokerRabbitMQ, Source: w.c.queue, MessageID: env.ID, DeliveryCount: env.DeliveryCount,
		Key: res.Key, Status: res.Status, Attempt: res.Attempt, Decision: dec, Err: serr, Problem: res.Problem,
	})
}

// heldInPlace holds a delivery whose handler did not run because the
// store is down, or because another delivery holds its key (in flight:
// the receiver's next look comes after 200 ms, doubling up to the
// holder's remaining lease), unacknowledged, for dec.Delay, and reports
// true when it is to be handed to the receiver again. Returning it to the
// queue instead would count towards a quorum queue's x-delivery-limit on
// RabbitMQ before 4.0 (Nack counts there): a store outage of a few
// seconds, or a duplicate arriving while its original runs, would
// dead-letter a healthy message. Each hold is reported as an in-place
// retry.
//
// It reports false, and the delivery is settled as dec says, when the
// consumer stops or the session ends (the delivery goes back unprocessed),
// or when another hold would keep the delivery past its horizon: its
// arrival plus ConsumerTimeout, less the receiver's lease and
// InPlaceRetryMax, after which the broker could close the channel. Only
// then does the outage return it to the queue.
func (w *worker[T, R]) heldInPlace(s *session, it *delivered[T], res dedup.Result[R], dec dedup.Decision) bool {
	c := w.c
	if dec.Action != dedup.Retry || !notRun(dec.Reason) || c.isStopping() || s.ctx.Err() != nil {
		return false
	}
	if time.Since(it.at)+dec.Delay > c.holdBudget {
		c.opts.Logger.WarnContext(s.ctx, "dedupamqp: the delivery was held as long as ConsumerTimeout allows; returning it to the queue",
			slog.String("reason", string(dec.Reason)),
			slog.String("queue", c.queue), slog.String("message_id", it.d.MessageId), slog.Duration("held", time.Since(it.at)),
			slog.Duration("consumer_timeout", c.opts.ConsumerTimeout), slog.Bool("counts_towards_delivery_limit", c.broker.nackCounts))
		return false
	}
	c.stats.inPlace.Add(1)
	w.settled(s, &it.env, res, dec, nil)
	return w.hold(s, dec.Delay) && !c.isStopping()
}

// notRun reports whether a retry is for a delivery whose handler did not
// run and that the receiver may take in a moment: the store is down, or
// another delivery holds the key.
func notRun(r dedup.Reason) bool {
	return r == dedup.ReasonStoreUnavailable || r == dedup.ReasonInFlight
}

// requeueUnhandled returns a delivery that arrived after Stop, unhandled:
// Nack(requeue=true), which RabbitMQ 4 does not count towards a quorum
// queue's delivery limit.
func (w *worker[T, R]) requeueUnhandled(s *session, env *dedup.Message[T], d *amqp.Delivery) {
	c := w.c
	err := w.nack(s, d)
	dec := dedup.Decision{Action: dedup.Retry, Reason: dedup.ReasonCanceled, Err: dedup.ErrCanceled}
	if err == nil {
		err = dec.Err
	}
	c.rcv.Observe(s.ctx, dedup.Event{
		Kind: dedup.EventSettled, Broker: BrokerRabbitMQ, Source: c.queue, MessageID: env.ID, DeliveryCount: env.DeliveryCount,
		Decision: dec, Err: err,
	})
}

// settle carries out the decision on the delivery's own channel. It
// returns the error that kept the decision from being carried out.
func (w *worker[T, R]) settle(s *session, d *amqp.Delivery, env *dedup.Message[T], res dedup.Result[R], dec dedup.Decision) error {
	switch dec.Action {
	case dedup.Ack:
		return w.ack(s, d)
	case dedup.DeadLetter:
		return w.deadLetter(s, d, env, res, dec)
	default:
		return w.retry(s, d, dec)
	}
}

// handlerRan reports whether the retry follows a failure of the handler,
// which should count towards a quorum queue's delivery limit, rather than
// a delivery that was not processed (in flight elsewhere, store down,
// shutdown).
func handlerRan(dec dedup.Decision) bool { return dec.Reason == dedup.ReasonHandlerError }

// retry hands the delivery back for another attempt after dec.Delay:
// through a retry tier when the delay is longer than InPlaceRetryMax, else
// (or when the tier cannot take it) in place.
func (w *worker[T, R]) retry(s *session, d *amqp.Delivery, dec dedup.Decision) error {
	c := w.c
	if s.ctx.Err() != nil || dec.Reason == dedup.ReasonCanceled {
		return w.nack(s, d) // not processed: back at once
	}
	var tierErr error
	if tier, ok := c.tierFor(dec.Delay); ok {
		name := RetryQueueName(c.queue, tier)
		tierErr = w.publish(s, "", name, retryPublishing(d, dec))
		if tierErr == nil {
			c.stats.tiered.Add(1)
			return w.ack(s, d)
		}
		c.opts.Logger.WarnContext(s.ctx, "dedupamqp: retry tier did not take the message; retrying in place",
			"queue", c.queue, "tier", name, "message_id", d.MessageId, "error", tierErr)
		tierErr = fmt.Errorf("retry tier %q: %w", name, tierErr)
	}
	w.hold(s, min(dec.Delay, c.opts.InPlaceRetryMax))
	c.stats.inPlace.Add(1)
	var err error
	if handlerRan(dec) && s.ctx.Err() == nil {
		err = w.reject(s, d, true)
	} else {
		err = w.nack(s, d)
	}
	return errors.Join(tierErr, err)
}

// tierFor picks the retry tier for delay: the shortest at least as long,
// else the longest. It reports false for a retry done in place.
func (c *Consumer[T, R]) tierFor(delay time.Duration) (time.Duration, bool) {
	tiers := c.opts.RetryTiers
	if len(tiers) == 0 || delay <= c.opts.InPlaceRetryMax {
		return 0, false
	}
	for _, t := range tiers {
		if t >= delay {
			return t, true
		}
	}
	return tiers[len(tiers)-1], true
}

// hold waits d before an in-place retry, or less when the session ends or
// the consumer stops (the delivery is then requeued at once). It reports
// whether it waited the whole of d.
func (w *worker[T, R]) hold(s *session, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
	case <-w.c.stopCtx.Done():
	}
	return false
}

// deadLetter publishes the dead letter and acknowledges the original once
// the broker confirmed it; if the dead letter cannot be published, the
// original is requeued (after a pause), never dropped. With
// RejectDeadLetters, the broker dead-letters it (Reject, requeue=false).
func (w *worker[T, R]) deadLetter(s *session, d *amqp.Delivery, env *dedup.Message[T], res dedup.Result[R], dec dedup.Decision) error {
	c := w.c
	if c.opts.RejectDeadLetters {
		if err := w.reject(s, d, false); err != nil {
			return err
		}
		c.stats.deadLetters.Add(1)
		return nil
	}
	err := w.publish(s, c.opts.DeadLetterExchange, c.opts.DeadLetterRoutingKey, deadLetterPublishing(d, c.queue, env.DeliveryCount, res, dec))
	if err == nil {
		c.stats.deadLetters.Add(1)
		return w.ack(s, d)
	}
	c.stats.deadLetterFailures.Add(1)
	c.opts.Logger.WarnContext(s.ctx, "dedupamqp: dead letter not published; the message is requeued",
		"queue", c.queue, "exchange", c.opts.DeadLetterExchange, "message_id", d.MessageId, "reason", string(dec.Reason), "error", err)
	err = fmt.Errorf("%w to exchange %q: %w", ErrDeadLetter, c.opts.DeadLetterExchange, err)
	w.hold(s, min(c.rcv.StoreRetryDelay(), c.opts.InPlaceRetryMax))
	return errors.Join(err, w.nack(s, d))
}

// publish sends msg with confirms and mandatory on the worker's publishing
// channel of session s, opening one when needed.
func (w *worker[T, R]) publish(s *session, exchange, key string, msg amqp.Publishing) error {
	c := w.c
	if s.dead.Load() {
		return ErrStaleDelivery
	}
	if w.pub != nil && (w.pubGen != s.gen || w.pub.ch.IsClosed()) {
		w.closePub()
	}
	if w.pub == nil {
		pub, err := openConfirmChannel(s.pub)
		if err != nil {
			return err
		}
		w.pub, w.pubGen = pub, s.gen
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), c.opts.SettleTimeout)
	defer cancel()
	reusable, err := w.pub.publish(ctx, exchange, key, msg)
	if !reusable {
		w.closePub()
	}
	return err
}

func (w *worker[T, R]) closePub() {
	if w.pub != nil {
		w.pub.close()
		w.pub = nil
	}
}

// ack, nack and reject settle d on the channel of s, the one it came on,
// and never on another: once s is retired they do nothing and return
// ErrStaleDelivery.
func (w *worker[T, R]) ack(s *session, d *amqp.Delivery) error {
	return w.c.settled(s, d, "ack", func() error { return s.ch.Ack(d.DeliveryTag, false) })
}

func (w *worker[T, R]) nack(s *session, d *amqp.Delivery) error {
	return w.c.settled(s, d, "nack", func() error { return s.ch.Nack(d.DeliveryTag, false, true) })
}

func (w *worker[T, R]) reject(s *session, d *amqp.Delivery, requeue bool) error {
	return w.c.settled(s, d, "reject", func() error { return s.ch.Reject(d.DeliveryTag, requeue) })
}

func (c *Consumer[T, R]) settled(s *session, d *amqp.Delivery, what string, send func() error) error {
	var err error
	if s.dead.Load() {
		c.stats.stale.Add(1)
		err = ErrStaleDelivery
	} else if err = send(); err != nil {
		c.stats.ackFailures.Add(1)
		err = fmt.Errorf("dedupamqp: %s of delivery %d: %w", what, d.DeliveryTag, err)
	}
	if err != nil {
		c.logSettleFailure(s.ctx, what, d, err)
	}
	return err
}
