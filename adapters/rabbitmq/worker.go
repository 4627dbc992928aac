package dedupamqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
)

// worker handles deliveries one at a time. It owns a publishing channel
// for retries and dead letters, opened on its session's publishing
// connection on first use, so that its publishes are one at a time (see
// confirmChannel) without a lock shared with the other workers.
type worker[T, R any] struct {
	c      *Consumer[T, R]
	pub    *confirmChannel
	pubGen uint64 // the session pub belongs to
	// busy is the time spent settling the current delivery: acknowledging
	// it and publishing its dead letter or retry copy, not holding it.
	busy time.Duration
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
				w.requeueUnhandled(s, it)
				continue
			}
			w.handle(s, it)
		}
		if !w.c.isStopping() {
			s.noteDrained()
		}
	}
}

// handle hands one delivery to the receiver (Deliver, or Refused for a
// body that does not decode) and settles it, reporting what was done
// (Delivery.Settled). A delivery refused because the store is down or its
// key is in flight is held and handed to the receiver again in place (see
// heldInPlace): each try is a delivery of its own, settled and reported
// on its own.
func (w *worker[T, R]) handle(s *session, it *delivered[T]) {
	c := w.c
	env := &it.env
	var dl adapter.Delivery[R]
	if err := adapter.DecodeBody(c.opts.Decoder, env); err != nil {
		dl = c.rcv.Refused(s.ctx, env, err)
	} else {
		dl = c.rcv.Deliver(s.ctx, env)
	}
	for w.heldInPlace(s, it, &dl) {
		dl = c.rcv.Deliver(s.ctx, env)
	}
	w.busy = 0
	done, err := w.settle(s, it, &dl)
	dl.Settled(adapter.Settlement{Decision: done, Duration: w.busy, Err: err})
}

// heldInPlace holds a delivery whose handler did not run because the
// store is down, or because another delivery holds its key (in flight:
// the receiver's next look comes after 200 ms, doubling up to the
// holder's remaining lease), unacknowledged, for its Decision's Delay,
// and reports true when it is to be handed to the receiver again: the
// try is then settled as a retry in place. Returning it to the queue
// instead would count towards a quorum queue's x-delivery-limit on
// RabbitMQ before 4.0 (Nack counts there): a store outage of a few
// seconds, or a duplicate arriving while its original runs, would
// dead-letter a healthy message.
//
// It reports false, and the delivery is settled as its Decision says,
// when the consumer stops or the session ends (the delivery goes back
// unprocessed), or when another hold would keep the delivery past its
// horizon: its arrival plus ConsumerTimeout, less the receiver's lease and
// InPlaceRetryMax, after which the broker could close the channel. Only
// then does the outage return it to the queue.
func (w *worker[T, R]) heldInPlace(s *session, it *delivered[T], dl *adapter.Delivery[R]) bool {
	c := w.c
	dec := dl.Decision
	if dec.Action != delivery.Retry || !notRun(dec.Reason) || c.isStopping() || s.ctx.Err() != nil {
		return false
	}
	if time.Since(it.at)+dec.Delay > c.holdBudget {
		c.opts.Logger.WarnContext(dl.Context(), "dedupamqp: the delivery was held as long as ConsumerTimeout allows; returning it to the queue",
			slog.String("reason", string(dec.Reason)),
			slog.String("queue", c.queue), slog.String("message_id", it.d.MessageId), slog.Duration("held", time.Since(it.at)),
			slog.Duration("consumer_timeout", c.opts.ConsumerTimeout), slog.Bool("counts_towards_delivery_limit", c.broker.nackCounts))
		return false
	}
	if !w.hold(s, dec.Delay) || c.isStopping() {
		return false
	}
	c.stats.retriedInPlace.Add(1)
	dl.Settled(adapter.Settlement{})
	return true
}

// notRun reports whether a retry is for a delivery whose handler did not
// run and that the receiver may take in a moment: the store is down, or
// another delivery holds the key.
func notRun(r delivery.Reason) bool {
	return r == delivery.ReasonStoreUnavailable || r == delivery.ReasonInFlight
}

// requeueUnhandled returns a delivery that arrived after Stop, unhandled:
// Nack(requeue=true), which RabbitMQ 4 does not count towards a quorum
// queue's delivery limit. It never reached the receiver, so it is reported
// to the Observer as it is (a retry, canceled) and not counted as a retry.
func (w *worker[T, R]) requeueUnhandled(s *session, it *delivered[T]) {
	c := w.c
	w.busy = 0
	err := w.nack(s.ctx, s, &it.d)
	c.rcv.Observe(s.ctx, delivery.Event{
		Origin:   it.env.Origin(),
		Decision: delivery.Decision{Action: delivery.Retry, Reason: delivery.ReasonCanceled, Err: dedup.ErrCanceled},
		Err:      dedup.ErrCanceled,
		Settled:  true, SettleDuration: w.busy, SettleErr: err,
	})
}

// settle carries out the delivery's Decision on its own channel. It
// returns what was done when that is not the Decision as it stands (zero
// otherwise), and the error that kept the Decision from being carried
// out.
func (w *worker[T, R]) settle(s *session, it *delivered[T], dl *adapter.Delivery[R]) (delivery.Decision, error) {
	ctx := dl.Context()
	switch dl.Decision.Action {
	case delivery.Ack:
		err := w.ack(ctx, s, &it.d)
		if err == nil {
			w.c.stats.acked.Add(1)
		}
		return delivery.Decision{}, err
	case delivery.DeadLetter:
		return delivery.Decision{}, w.deadLetter(ctx, s, it, dl)
	default:
		return w.retry(ctx, s, &it.d, dl.Decision)
	}
}

// handlerRan reports whether the retry follows a failure of the handler,
// which should count towards a quorum queue's delivery limit, rather than
// a delivery that was not processed (in flight elsewhere, store down,
// shutdown).
func handlerRan(dec delivery.Decision) bool { return dec.Reason == delivery.ReasonHandlerError }

// retry hands the delivery back for another attempt after dec.Delay:
// through a retry tier when the delay is longer than InPlaceRetryMax, else
// (or when the tier cannot take it) in place. It returns the retry done:
// dec with the tier's delay, or the time the delivery was held before it
// was returned to the queue.
func (w *worker[T, R]) retry(ctx context.Context, s *session, d *amqp.Delivery, dec delivery.Decision) (delivery.Decision, error) {
	c := w.c
	done := dec
	if s.ctx.Err() != nil || dec.Reason == delivery.ReasonCanceled {
		done.Delay = 0
		return done, w.requeue(ctx, s, d, false) // not processed: back at once
	}
	var tierErr error
	if tier, ok := c.tierFor(dec.Delay); ok {
		name := adapter.RetryName(c.queue, tier)
		msg := retryPublishing(d, dec)
		w.inject(ctx, msg.Headers)
		tierErr = w.publish(ctx, s, "", name, msg)
		if tierErr == nil {
			c.stats.retriedLater.Add(1)
			done.Delay = tier
			return done, w.ack(ctx, s, d)
		}
		w.publishFailed(tierErr)
		c.opts.Logger.WarnContext(ctx, "dedupamqp: retry tier did not take the message; retrying in place",
			slog.String("queue", c.queue), slog.String("tier", name), slog.String("message_id", d.MessageId), slog.Any("error", tierErr))
		tierErr = fmt.Errorf("retry tier %q: %w", name, tierErr)
	}
	began := time.Now()
	if done.Delay = min(dec.Delay, c.opts.InPlaceRetryMax); !w.hold(s, done.Delay) {
		done.Delay = time.Since(began) // cut short: the session ended, or Stop
	}
	err := w.requeue(ctx, s, d, handlerRan(dec) && s.ctx.Err() == nil)
	return done, errors.Join(tierErr, err)
}

// requeue returns d to the queue, with Reject when failed (a handler
// failure), else Nack, and counts it as a retry in place when the broker
// took it.
func (w *worker[T, R]) requeue(ctx context.Context, s *session, d *amqp.Delivery, failed bool) error {
	var err error
	if failed {
		err = w.reject(ctx, s, d, true)
	} else {
		err = w.nack(ctx, s, d)
	}
	if err == nil {
		w.c.stats.retriedInPlace.Add(1)
	}
	return err
}

// inject writes the trace context of ctx, the delivery's, into the headers
// of a dead letter or retry copy, when the receiver's Observer is a
// delivery.Injector: a header of the same name the original had (the
// producer's traceparent) takes the new value.
func (w *worker[T, R]) inject(ctx context.Context, h amqp.Table) {
	w.c.rcv.Inject(ctx, func(k, v string) { h[k] = v })
}

// publishFailed counts a dead letter or retry copy the broker did not
// take; one not sent because the session is gone is counted as stale when
// the original is returned.
func (w *worker[T, R]) publishFailed(err error) {
	if !errors.Is(err, ErrStaleDelivery) {
		w.c.stats.settleFailures.Add(1)
	}
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
// original is requeued (after a pause), never dropped. With DropPoison,
// it is rejected (requeue=false) to the queue's own dead-letter exchange,
// or dropped by the broker when the queue has none.
func (w *worker[T, R]) deadLetter(ctx context.Context, s *session, it *delivered[T], dl *adapter.Delivery[R]) error {
	c := w.c
	d, dec := &it.d, dl.Decision
	if c.opts.DropPoison {
		if err := w.reject(ctx, s, d, false); err != nil {
			return err
		}
		c.stats.poisonDropped.Add(1)
		return nil
	}
	msg := deadLetterPublishing(d, c.queue, it.env.DeliveryCount, dl.Result, dec)
	w.inject(ctx, msg.Headers)
	err := w.publish(ctx, s, c.opts.DeadLetterExchange, c.opts.DeadLetterRoutingKey, msg)
	if err == nil {
		c.stats.deadLettered.Add(1)
		return w.ack(ctx, s, d)
	}
	w.publishFailed(err)
	c.opts.Logger.WarnContext(ctx, "dedupamqp: dead letter not published; the message is requeued",
		slog.String("queue", c.queue), slog.String("exchange", c.opts.DeadLetterExchange), slog.String("message_id", d.MessageId),
		slog.String("reason", string(dec.Reason)), slog.Any("error", err))
	err = fmt.Errorf("%w to exchange %q: %w", ErrDeadLetter, c.opts.DeadLetterExchange, err)
	w.hold(s, min(c.rcv.StoreRetryDelay(), c.opts.InPlaceRetryMax))
	return errors.Join(err, w.nack(ctx, s, d))
}

// publish sends msg with confirms and mandatory on the worker's publishing
// channel of session s, opening one when needed. ctx is the delivery's:
// the publish is bounded by SettleTimeout, not by ctx's end.
func (w *worker[T, R]) publish(ctx context.Context, s *session, exchange, key string, msg amqp.Publishing) error {
	defer w.timed(time.Now())
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
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.SettleTimeout)
	defer cancel()
	reusable, err := w.pub.publish(pctx, exchange, key, msg)
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

// timed adds the time since began to what settling the delivery took.
func (w *worker[T, R]) timed(began time.Time) { w.busy += time.Since(began) }

// ack, nack and reject settle d on the channel of s, the one it came on,
// and never on another: once s is retired they do nothing and return
// ErrStaleDelivery. ctx is the delivery's, for the logs.
func (w *worker[T, R]) ack(ctx context.Context, s *session, d *amqp.Delivery) error {
	defer w.timed(time.Now())
	return w.c.settled(ctx, s, d, "ack", func() error { return s.ch.Ack(d.DeliveryTag, false) })
}

func (w *worker[T, R]) nack(ctx context.Context, s *session, d *amqp.Delivery) error {
	defer w.timed(time.Now())
	return w.c.settled(ctx, s, d, "nack", func() error { return s.ch.Nack(d.DeliveryTag, false, true) })
}

func (w *worker[T, R]) reject(ctx context.Context, s *session, d *amqp.Delivery, requeue bool) error {
	defer w.timed(time.Now())
	return w.c.settled(ctx, s, d, "reject", func() error { return s.ch.Reject(d.DeliveryTag, requeue) })
}

func (c *Consumer[T, R]) settled(ctx context.Context, s *session, d *amqp.Delivery, what string, send func() error) error {
	var err error
	if s.dead.Load() {
		c.stats.stale.Add(1)
		err = ErrStaleDelivery
	} else if err = send(); err != nil {
		c.stats.settleFailures.Add(1)
		err = fmt.Errorf("dedupamqp: %s of delivery %d: %w", what, d.DeliveryTag, err)
	}
	if err != nil {
		c.logSettleFailure(ctx, what, d, err)
	}
	return err
}
