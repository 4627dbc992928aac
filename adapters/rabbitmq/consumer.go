package dedupamqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/outbox"
)

// Consumer runs a dedup.Receiver over a RabbitMQ queue: it consumes with
// manual acknowledgements on Options.Concurrency workers, decodes each
// body into a dedup.Message, hands it to the receiver and settles the
// delivery as the receiver's Decide says, on the channel it came from. It
// owns its connections: when one is lost it reconnects with backoff and
// resumes, and a delivery of a lost channel is never settled on another.
type Consumer[T, R any] struct {
	queue string
	rcv   *adapter.Receiver[*dedup.Message[T], R]
	opts  Options
	tag   string // consumer tag prefix; each session appends its generation

	// holdBudget is how long after its arrival a delivery the store could
	// not take may still be held for another attempt: ConsumerTimeout less
	// the receiver's lease and InPlaceRetryMax (the horizon Start checks).
	holdBudget time.Duration
	broker     brokerInfo // read at Start
	server     server     // url's, when the Consumer dials it; else each session's connection's

	mu        sync.Mutex
	started   bool
	stopAsked bool          // Stop was called
	stopping  bool          // no new session; deliveries not yet handled are requeued
	cur       *session      // the newest session, live or not
	changed   chan struct{} // closed (and replaced) when cur or stopping changes
	err       error         // why the consumer stopped on its own

	stoppingFlag atomic.Bool // stopping, readable without mu

	hardCtx    context.Context // the handlers' root: cancelled by a hard stop
	hardCancel context.CancelFunc
	stopCtx    context.Context // cancelled when Stop is called, or by a hard stop
	stopCancel context.CancelFunc
	workers    sync.WaitGroup
	stopped    chan struct{}

	stats counters
}

var _ dedup.Consumer = (*Consumer[struct{}, struct{}])(nil)

// NewConsumer returns a Consumer of queue on the broker at url (an
// amqp:// or amqps:// URI; "" when opts.Dial is set), feeding rcv. Nothing
// is dialled before Start.
//
// A nil opts means all defaults, but where poison goes has no default:
// options that set neither Options.DeadLetterExchange nor
// Options.DropPoison (nil among them) are refused with an error
// matching dedup.ErrInvalidConfig that names both. An empty queue, a nil
// rcv, or neither url nor Options.Dial are refused the same way, naming
// what is missing; NewConsumer never panics on them.
//
// What the caller passes in stays the caller's: the Consumer never closes
// rcv or its store. It closes only what it made itself: the connections it
// opened with Options.Dial (or DialURL(url)), and their channels.
func NewConsumer[T, R any](url, queue string, rcv *dedup.Receiver[*dedup.Message[T], R], opts *Options) (*Consumer[T, R], error) {
	switch {
	case queue == "":
		return nil, wrapConfig("queue is empty: name the queue to consume")
	case rcv == nil:
		return nil, wrapConfig("receiver is nil")
	}
	b := adapter.Bind(rcv)
	o := opts.withDefaults(url, b.Logger())
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.DeadLetterRoutingKey == "" {
		o.DeadLetterRoutingKey = queue
	}
	return &Consumer[T, R]{
		queue:      queue,
		rcv:        b,
		opts:       o,
		holdBudget: o.ConsumerTimeout - rcv.Lease() - o.InPlaceRetryMax,
		server:     urlServer(url, dialOf(opts)),
		tag:        "dedup-" + queue + "-" + outbox.NewMessageID()[:8],
		changed:    make(chan struct{}),
		stopped:    make(chan struct{}),
	}, nil
}

// Start connects, checks the topology (the dead-letter exchange and every
// retry tier's queue must exist) and the horizon (see
// Options.StrictHorizon), logs the broker's version and which returns a
// quorum queue counts towards its x-delivery-limit on it, starts consuming
// and returns once the workers run. A failure at Start is returned, not
// retried. A Consumer starts once.
//
// ctx bounds the consumer's whole life, not only Start: when it ends
// without Stop, that is a hard stop (consuming stops, the handlers'
// contexts are cancelled), logged at error level, and Err then returns an
// error matching ErrStoppedUnasked that wraps context.Cause(ctx). Pass a
// context that lasts as long as the consumer should, and stop it with Stop
// and a context of its own:
//
//	if err := c.Start(context.Background()); err != nil { ... }
//	<-sigCtx.Done() // signal.NotifyContext
//	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
//	defer cancel()
//	err := c.Stop(stopCtx)
func (c *Consumer[T, R]) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return ErrStarted
	}
	if err := c.checkHorizon(ctx); err != nil {
		return err
	}
	c.hardCtx, c.hardCancel = context.WithCancel(context.WithoutCancel(ctx))
	c.stopCtx, c.stopCancel = context.WithCancel(c.hardCtx)
	s, err := c.open(ctx, 1)
	if err == nil {
		if err = c.checkTopology(ctx, s); err != nil {
			s.retire(c.opts.SettleTimeout)
		}
	}
	if err != nil {
		c.stopCancel()
		c.hardCancel()
		return err
	}
	c.started = true
	c.cur = s
	c.logBroker(ctx, s.conn)
	watched := make(chan struct{}) // closed once the watch below ran
	stopWatch := context.AfterFunc(ctx, func() {
		defer close(watched)
		c.stoppedUnasked(ctx)
		c.hardCancel()
	})
	for range c.opts.Concurrency {
		w := &worker[T, R]{c: c}
		c.workers.Go(w.run)
	}
	go func() { // the supervisor: owned by the consumer, ends after the workers
		c.supervise(s)
		if !stopWatch() {
			<-watched // Err holds what the watch records before Stopped closes
		}
		c.stopCancel()
		c.hardCancel()
		close(c.stopped)
	}()
	return nil
}

// Stop cancels the consumer, lets the handlers running finish and settle
// (deliveries prefetched but not started are requeued with
// Nack(requeue=true): not processed), closes the connections and returns.
// When ctx ends first, the handlers' contexts are cancelled (their
// deliveries are requeued) and Stop returns ctx's error; Stopped tells
// when the consumer is gone.
func (c *Consumer[T, R]) Stop(ctx context.Context) error {
	c.mu.Lock()
	if !c.started {
		c.mu.Unlock()
		return ErrNotStarted
	}
	c.stopAsked = true
	c.setStoppingLocked()
	c.mu.Unlock()
	c.stopCancel()
	select {
	case <-c.stopped:
		return nil
	case <-ctx.Done():
		c.hardCancel()
		return ctx.Err()
	}
}

// Stopped is closed when the consumer has stopped: after Stop, or without
// it (Start's context ended, the queue deleted: Err says why).
func (c *Consumer[T, R]) Stopped() <-chan struct{} { return c.stopped }

// Err returns why the consumer stopped without Stop: an error matching
// ErrStoppedUnasked and wrapping context.Cause of Start's context when that
// ended, or ErrQueueDeleted when the queue was deleted. It returns nil
// while the consumer runs, and after a Stop that came first.
func (c *Consumer[T, R]) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Stats returns what the Consumer did with its deliveries since it
// started, in the shape every adapter of dedup shares:
//
//	Delivered        deliveries the broker handed the consumer (a try held in place is not one more)
//	Acked            deliveries acknowledged because their effect happened: processed, duplicate, bypassed
//	RetriedInPlace   tries held in place and handed to the receiver again (store down, key in flight),
//	                 and deliveries returned to the queue (Reject or Nack with requeue) after the
//	                 receiver answered them; not those returned unhandled at Stop
//	RetriedLater     copies a retry tier's queue took (confirmed by the broker)
//	DeadLettered     dead letters the broker confirmed
//	PoisonDropped    poison rejected without requeue (DropPoison): to the queue's own dead-letter
//	                 exchange, or dropped without one
//	SettleFailures   acks, nacks and rejects the channel refused or could not send, and dead letters
//	                 and retry copies the broker did not take: a redelivery is coming, which the
//	                 store answers
//	Reconnects       sessions opened after a lost connection or channel
//	StaleDeliveries  deliveries whose channel was gone when their outcome was known: not settled
//	                 (ErrStaleDelivery); the broker redelivers them
func (c *Consumer[T, R]) Stats() dedup.ConsumerStats {
	s := &c.stats
	return dedup.ConsumerStats{
		Delivered:       s.delivered.Load(),
		Acked:           s.acked.Load(),
		RetriedInPlace:  s.retriedInPlace.Load(),
		RetriedLater:    s.retriedLater.Load(),
		DeadLettered:    s.deadLettered.Load(),
		PoisonDropped:   s.poisonDropped.Load(),
		SettleFailures:  s.settleFailures.Load(),
		Reconnects:      s.reconnects.Load(),
		StaleDeliveries: s.stale.Load(),
	}
}

// setStoppingLocked marks the consumer stopping and wakes the workers
// waiting for a session. c.mu is held.
func (c *Consumer[T, R]) setStoppingLocked() {
	if c.stopping {
		return
	}
	c.stopping = true
	c.stoppingFlag.Store(true)
	close(c.changed)
	c.changed = make(chan struct{})
}

// install makes s the current session and wakes the workers.
func (c *Consumer[T, R]) install(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur = s
	close(c.changed)
	c.changed = make(chan struct{})
}

// nextSession returns the first session newer than generation after, or
// nil once the consumer is stopping.
func (c *Consumer[T, R]) nextSession(after uint64) *session {
	for {
		c.mu.Lock()
		s, stopping, changed := c.cur, c.stopping, c.changed
		c.mu.Unlock()
		if stopping {
			return nil
		}
		if s != nil && s.gen > after {
			return s
		}
		<-changed
	}
}

func (c *Consumer[T, R]) markStopping() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setStoppingLocked()
}

// isStopping is stopping without the lock, for the workers' hot path.
func (c *Consumer[T, R]) isStopping() bool { return c.stoppingFlag.Load() }

// fail records why the consumer stops on its own.
func (c *Consumer[T, R]) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = fmt.Errorf("%w: %w", ErrStoppedUnasked, err)
	}
	c.setStoppingLocked()
}

// stoppedUnasked records, and logs at error level, a hard stop by the end
// of Start's context, unless Stop was called first or the consumer had
// already stopped on its own.
func (c *Consumer[T, R]) stoppedUnasked(ctx context.Context) {
	cause := context.Cause(ctx)
	c.mu.Lock()
	if c.stopAsked || c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = fmt.Errorf("%w: Start's context ended: %w", ErrStoppedUnasked, cause)
	c.mu.Unlock()
	c.opts.Logger.ErrorContext(context.WithoutCancel(ctx), "dedupamqp: consumer stopped without Stop: Start's context ended (a hard stop); pass Start a context that lasts, and stop with Stop",
		slog.String("queue", c.queue), slog.Any("error", cause))
}

// counters are the Consumer's [dedup.ConsumerStats].
type counters struct {
	delivered, acked, retriedInPlace, retriedLater, deadLettered, poisonDropped, settleFailures, reconnects, stale atomic.Uint64
}

// checkTopology makes sure the exchanges and queues the consumer publishes
// to exist, with passive declarations on a channel of their own (a missing
// one closes it).
func (c *Consumer[T, R]) checkTopology(ctx context.Context, s *session) error {
	check := func(what string, declare func(ch *amqp.Channel) error) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		ch, err := s.pub.Channel()
		if err != nil {
			return fmt.Errorf("dedupamqp: open a channel to check %s: %w", what, err)
		}
		defer func() { _ = ch.Close() }()
		if err := declare(ch); err != nil {
			return fmt.Errorf("dedupamqp: %s: %w", what, err)
		}
		return nil
	}
	if x := c.opts.DeadLetterExchange; x != "" {
		err := check(fmt.Sprintf("dead-letter exchange %q", x), func(ch *amqp.Channel) error {
			return ch.ExchangeDeclarePassive(x, amqp.ExchangeDirect, true, false, false, false, nil)
		})
		if err != nil {
			return fmt.Errorf("%w (declare it, with Topology for instance, or set DropPoison to reject poison to the queue's own)", err)
		}
	}
	for _, d := range c.opts.RetryTiers {
		name := adapter.RetryName(c.queue, d)
		err := check(fmt.Sprintf("retry queue %q", name), func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
			return err
		})
		if err != nil {
			return fmt.Errorf("%w (declare the retry tiers with Topology)", err)
		}
	}
	return nil
}

// checkHorizon compares the receiver's lease with the broker's
// consumer_timeout and its retention with the longest retry tier.
func (c *Consumer[T, R]) checkHorizon(ctx context.Context) error {
	var problems []string
	if hold := c.rcv.Lease() + c.opts.InPlaceRetryMax; hold >= c.opts.ConsumerTimeout {
		problems = append(problems, fmt.Sprintf("the receiver's lease %v plus InPlaceRetryMax %v is not under the broker's consumer_timeout %v (Options.ConsumerTimeout): the broker would close the channel of a delivery held that long", c.rcv.Lease(), c.opts.InPlaceRetryMax, c.opts.ConsumerTimeout))
	}
	if n := len(c.opts.RetryTiers); n > 0 && c.opts.RetryTiers[n-1] > c.rcv.Retention() {
		problems = append(problems, fmt.Sprintf("the longest retry tier %v is longer than the receiver's retention %v: a message parked there comes back after its record expired", c.opts.RetryTiers[n-1], c.rcv.Retention()))
	}
	for _, p := range problems {
		if c.opts.StrictHorizon {
			return &horizonError{msg: "dedupamqp: " + p}
		}
		c.opts.Logger.WarnContext(ctx, "dedupamqp: "+p)
	}
	return nil
}

// logSettleFailure logs a settlement the broker did not take.
func (c *Consumer[T, R]) logSettleFailure(ctx context.Context, what string, d *amqp.Delivery, err error) {
	if errors.Is(err, ErrStaleDelivery) {
		c.opts.Logger.DebugContext(ctx, "dedupamqp: "+what+" not sent: the delivery's channel is gone; the broker redelivers it",
			slog.String("queue", c.queue), slog.String("message_id", d.MessageId))
		return
	}
	c.opts.Logger.WarnContext(ctx, "dedupamqp: "+what+" failed; the broker will redeliver the message",
		slog.String("queue", c.queue), slog.String("message_id", d.MessageId), slog.Any("error", err))
}
