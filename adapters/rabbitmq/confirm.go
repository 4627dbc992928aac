package dedupamqp

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// confirmChannel publishes one message at a time, mandatory, on a channel
// in confirm mode, and reports whether the broker routed and stored it.
//
// One at a time is what makes returns attributable: RabbitMQ sends the
// basic.return of an unroutable mandatory message before its basic.ack,
// and amqp091 hands the return to the buffered channel before it reads
// the ack, so once the confirm of the only publish in flight has arrived,
// a return in the buffer is that publish's. A channel whose publish ended
// in doubt (a timeout, a closed channel) is closed, never reused.
type confirmChannel struct {
	ch      *amqp.Channel
	returns chan amqp.Return
}

func openConfirmChannel(conn *amqp.Connection) (*confirmChannel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open a publishing channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("put the publishing channel in confirm mode: %w", err)
	}
	return &confirmChannel{ch: ch, returns: ch.NotifyReturn(make(chan amqp.Return, 1))}, nil
}

// publish sends msg and waits for its confirm. It returns an error matching
// ErrReturned when the broker could not route it, ErrNacked when it
// refused it, and reports whether the channel may be used again.
func (c *confirmChannel) publish(ctx context.Context, exchange, key string, msg amqp.Publishing) (reusable bool, err error) {
	dc, err := c.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, msg)
	if err != nil {
		return false, fmt.Errorf("publish to exchange %q, routing key %q: %w", exchange, key, err)
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		return false, fmt.Errorf("confirm of the publish to exchange %q, routing key %q: %w", exchange, key, err)
	}
	select {
	case r, ok := <-c.returns:
		if ok {
			return true, fmt.Errorf("exchange %q, routing key %q: %d %s: %w", exchange, key, r.ReplyCode, r.ReplyText, ErrReturned)
		}
		// amqp091 closes the returns when the channel closes.
	default:
	}
	switch {
	case acked:
	case c.ch.IsClosed():
		// The broker closed the channel (an exchange that does not exist,
		// say): amqp091 nacks what was pending.
		return false, fmt.Errorf("exchange %q, routing key %q: the channel closed: %w", exchange, key, ErrNacked)
	default:
		return true, fmt.Errorf("exchange %q, routing key %q: %w", exchange, key, ErrNacked)
	}
	return true, nil
}

func (c *confirmChannel) close() { _ = c.ch.Close() }
