package dedupamqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dedup-go/dedup/adapter"
	amqp "github.com/rabbitmq/amqp091-go"
)

// session is one connection's worth of consuming: the consuming
// connection and channel, the publishing connection, and the deliveries.
// Every delivery is settled through the session it came from, never
// another: a delivery tag means something only on its own channel, and the
// same number on a newer channel names another message.
type session struct {
	gen       uint64
	conn, pub *amqp.Connection
	ch        *amqp.Channel
	tag       string
	// arrivals is a chan *delivered[T] of the Consumer's T: the deliveries
	// as they arrived, stamped and with their envelopes (see forward).
	arrivals any

	// ctx is the handlers' context: cancelled when the session ends (its
	// deliveries come back from the broker, and the store answers them) or
	// at a hard stop.
	ctx    context.Context
	cancel context.CancelFunc
	dead   atomic.Bool

	connClosed, pubClosed, chClosed chan *amqp.Error
	cancelled                       chan string

	// drained is closed by the first worker that sees the deliveries end
	// while the consumer is not stopping: a loss no notification told of.
	drained   chan struct{}
	drainOnce sync.Once
}

// noteDrained tells the supervisor that the deliveries ended.
func (s *session) noteDrained() { s.drainOnce.Do(func() { close(s.drained) }) }

// errQueueMissing marks a consume refused because the queue does not exist.
var errQueueMissing = errors.New("queue not found")

// open dials both connections, opens the consuming channel with its
// prefetch and starts consuming.
func (c *Consumer[T, R]) open(ctx context.Context, gen uint64) (_ *session, err error) {
	s := &session{gen: gen, tag: c.tag + "-" + strconv.FormatUint(gen, 10), drained: make(chan struct{})}
	defer func() {
		if err != nil {
			s.retire(c.opts.SettleTimeout)
		}
	}()
	if s.conn, err = c.opts.Dial(ctx); err != nil {
		return nil, fmt.Errorf("dedupamqp: dial: %w", err)
	}
	if s.pub, err = c.opts.Dial(ctx); err != nil {
		return nil, fmt.Errorf("dedupamqp: dial the publishing connection: %w", err)
	}
	s.connClosed = s.conn.NotifyClose(make(chan *amqp.Error, 1))
	s.pubClosed = s.pub.NotifyClose(make(chan *amqp.Error, 1))
	if s.ch, err = s.conn.Channel(); err != nil {
		return nil, fmt.Errorf("dedupamqp: open the consuming channel: %w", err)
	}
	s.chClosed = s.ch.NotifyClose(make(chan *amqp.Error, 1))
	s.cancelled = s.ch.NotifyCancel(make(chan string, 1))
	// Per channel, never global: global Qos in RabbitMQ is shared by every
	// consumer of the connection.
	if err = s.ch.Qos(c.opts.Prefetch, 0, false); err != nil {
		return nil, fmt.Errorf("dedupamqp: set the prefetch: %w", err)
	}
	deliveries, err := s.ch.Consume(c.queue, s.tag, false, false, false, false, nil)
	if err != nil {
		var aerr *amqp.Error
		if errors.As(err, &aerr) && aerr.Code == amqp.NotFound {
			return nil, fmt.Errorf("dedupamqp: consume %q: %w: %w", c.queue, errQueueMissing, err)
		}
		return nil, fmt.Errorf("dedupamqp: consume %q: %w", c.queue, err)
	}
	// Room for every delivery the prefetch lets the broker send: the
	// forwarder never waits for a worker, so each delivery is stamped when
	// it arrives. It ends when amqp091 closes the deliveries (the consumer
	// cancelled, the channel or connection closed).
	arrivals := make(chan *delivered[T], c.opts.Prefetch)
	go c.forward(deliveries, arrivals)
	s.arrivals = arrivals
	s.ctx, s.cancel = context.WithCancel(adapter.WithOrigin(c.hardCtx, c.originOf(s.conn)))
	return s, nil
}

// forward hands the deliveries to the workers, each stamped with its
// arrival and wrapped in its envelope. A delivery waiting for a free
// worker (Prefetch above Concurrency) is already on the clock of the
// broker's consumer_timeout, which the stamp lets a worker respect.
func (c *Consumer[T, R]) forward(deliveries <-chan amqp.Delivery, arrivals chan<- *delivered[T]) {
	defer close(arrivals)
	for d := range deliveries {
		c.stats.delivered.Add(1)
		arrivals <- envelope[T](d, c.queue, c.opts.Fingerprint, time.Now())
	}
}

// retire ends a session: its handlers' contexts are cancelled, nothing is
// settled on it any more, and both connections are closed (the broker
// requeues what was not settled).
func (s *session) retire(timeout time.Duration) {
	s.dead.Store(true)
	if s.cancel != nil {
		s.cancel()
	}
	for _, conn := range []*amqp.Connection{s.conn, s.pub} {
		if conn != nil {
			_ = conn.CloseDeadline(time.Now().Add(timeout))
		}
	}
}

// ending says why a session ended.
type ending int

const (
	endStop    ending = iota + 1 // Stop, or a hard stop
	endLost                      // a connection or channel closed
	endDeleted                   // the queue is gone
)

// supervise watches the current session and replaces it when it is lost,
// until the consumer stops. It returns after the workers are gone and the
// last session is closed.
func (c *Consumer[T, R]) supervise(s *session) {
	defer func() {
		c.markStopping()
		c.workers.Wait()
		if s != nil {
			s.retire(c.opts.SettleTimeout)
		}
	}()
	for {
		switch why, err := c.watch(s); why {
		case endStop:
			c.markStopping() // also on a hard stop, which Stop did not announce
			// The broker stops delivering; amqp091 hands over what it has
			// buffered, then closes the deliveries, which the workers
			// requeue (stopping) before they return.
			if err := s.ch.Cancel(s.tag, false); err != nil && !errors.Is(err, amqp.ErrClosed) {
				c.opts.Logger.WarnContext(s.ctx, "dedupamqp: cancel the consumer", slog.Any("error", err))
			}
			c.workers.Wait()
			return
		case endDeleted:
			c.opts.Logger.ErrorContext(s.ctx, "dedupamqp: the queue was deleted; the consumer stops", slog.String("queue", c.queue))
			c.fail(fmt.Errorf("%w: %q", ErrQueueDeleted, c.queue))
			c.workers.Wait()
			return
		default:
			c.opts.Logger.WarnContext(s.ctx, "dedupamqp: connection lost; reconnecting", slog.String("queue", c.queue), slog.Any("error", err))
			s.retire(c.opts.SettleTimeout)
			if s = c.reconnect(s.gen + 1); s == nil {
				return
			}
			c.install(s)
			c.stats.reconnects.Add(1)
		}
	}
}

// watch waits for the end of s.
func (c *Consumer[T, R]) watch(s *session) (ending, error) {
	select {
	case <-c.stopCtx.Done():
		return endStop, nil
	case e := <-s.connClosed:
		return endLost, closeError("connection", e)
	case e := <-s.pubClosed:
		return endLost, closeError("publishing connection", e)
	case e := <-s.chClosed:
		return endLost, closeError("channel", e)
	case <-s.drained:
		if c.queueGone(s) {
			return endDeleted, nil
		}
		return endLost, errors.New("dedupamqp: the deliveries ended")
	case tag := <-s.cancelled:
		// The broker cancelled the consumer: the queue was deleted, or
		// another reason (a leader moving): resubscribe if it still exists.
		if c.queueGone(s) {
			return endDeleted, nil
		}
		return endLost, fmt.Errorf("dedupamqp: the broker cancelled consumer %q", tag)
	}
}

func closeError(what string, e *amqp.Error) error {
	if e == nil {
		return fmt.Errorf("dedupamqp: %s closed", what)
	}
	return fmt.Errorf("dedupamqp: %s closed: %w", what, e)
}

// queueGone reports whether the queue is known not to exist (a passive
// declaration answered 404).
func (c *Consumer[T, R]) queueGone(s *session) bool {
	ch, err := s.pub.Channel()
	if err != nil {
		return false
	}
	defer func() { _ = ch.Close() }()
	_, err = ch.QueueDeclarePassive(c.queue, true, false, false, false, nil)
	var aerr *amqp.Error
	return errors.As(err, &aerr) && aerr.Code == amqp.NotFound
}

// reconnect opens session gen, retrying with ReconnectBackoff until it
// succeeds, the queue turns out deleted (the consumer fails) or the
// consumer stops (nil).
func (c *Consumer[T, R]) reconnect(gen uint64) *session {
	for attempt := 1; ; attempt++ {
		t := time.NewTimer(c.opts.ReconnectBackoff.Delay(attempt))
		select {
		case <-t.C:
		case <-c.stopCtx.Done():
			t.Stop()
			return nil
		}
		s, err := c.open(c.stopCtx, gen)
		switch {
		case err == nil:
			c.opts.Logger.InfoContext(s.ctx, "dedupamqp: reconnected", slog.String("queue", c.queue), slog.Int("attempt", attempt))
			return s
		case errors.Is(err, errQueueMissing):
			c.opts.Logger.ErrorContext(c.stopCtx, "dedupamqp: the queue is gone; the consumer stops", slog.String("queue", c.queue))
			c.fail(fmt.Errorf("%w: %w", ErrQueueDeleted, err))
			return nil
		case c.stopCtx.Err() != nil:
			return nil
		}
		c.opts.Logger.WarnContext(c.stopCtx, "dedupamqp: reconnect failed", slog.String("queue", c.queue), slog.Int("attempt", attempt), slog.Any("error", err))
	}
}
