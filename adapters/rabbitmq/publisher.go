package dedupamqp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/outbox"
)

// Publisher publishes messages that consumers can deduplicate: each one
// carries a MessageId (the one set on it, else the one MessageID derives,
// else a fresh random id) and is published mandatory on a channel in
// confirm mode, so that Publish returns only once the broker routed and
// stored it (or says why not: ErrReturned, ErrNacked). A Publisher is safe
// for concurrent use; it publishes one message at a time, each waiting for
// its confirm (a round trip), which is what lets it attribute a return to
// its message. Use several Publishers for more throughput.
type Publisher struct {
	conn      *amqp.Connection
	messageID dedup.KeyFunc[amqp.Publishing]
	injector  delivery.Injector

	// turn is held (a value in it) by the one call that publishes, or by
	// Close: a channel rather than a mutex, so that the wait for it ends
	// with a context.
	turn chan struct{}

	mu     sync.Mutex // guards ch and closed, which Close reads out of turn
	ch     *confirmChannel
	closed bool
}

// PublisherOptions configure a Publisher; nil means the defaults.
type PublisherOptions struct {
	// MessageID derives the MessageId of a message published without one:
	// a key strategy over amqp.Publishing, such as
	// idstrategy.ContentHash(func(p amqp.Publishing) ([]byte, error) {
	// return p.Body, nil }), so that the same body published twice carries
	// the same id. Defaults to nil: a fresh random id (outbox.NewMessageID) per
	// call. A producer retrying a Publish whose outcome it does not know
	// must keep the id: set MessageId itself, or derive it.
	MessageID dedup.KeyFunc[amqp.Publishing]

	// Injector, when set, writes the trace context of the ctx given to
	// Publish into each message's headers (a copy of them: the caller's
	// table is not changed; a header of the same name the message already
	// has takes the new value), so that the consumer's delivery is linked
	// to the producer's trace: the dedupotel Observer is one (W3C
	// traceparent and tracestate). It runs after MessageID, which never
	// sees the trace context. Defaults to none.
	Injector delivery.Injector
}

// NewPublisher returns a Publisher on conn. It opens its channel on first
// use, and again after the channel closed. A nil opts means the defaults.
// conn stays the caller's: the Publisher never closes it; Close closes only
// the channel the Publisher opened.
func NewPublisher(conn *amqp.Connection, opts *PublisherOptions) (*Publisher, error) {
	if conn == nil {
		return nil, wrapConfig("connection is nil")
	}
	p := &Publisher{conn: conn, turn: make(chan struct{}, 1)}
	if opts != nil {
		p.messageID, p.injector = opts.MessageID, opts.Injector
	}
	return p, nil
}

// Publish sends msg to exchange with routing key, mandatory, and waits for
// the broker's confirm or ctx's end. It returns the MessageId the message
// was published with. With PublisherOptions.Injector, the trace context of
// ctx is written into the message's headers. An error matching ErrReturned means no queue is
// bound for it; ErrNacked that the broker refused it; any other error
// leaves it unknown whether the broker stored it: publish it again with
// the same MessageId, which consumers deduplicate on. After Close, Publish
// fails with ErrPublisherClosed.
func (p *Publisher) Publish(ctx context.Context, exchange, key string, msg amqp.Publishing) (string, error) {
	if msg.MessageId == "" {
		id, err := p.newID(msg)
		if err != nil {
			return "", err
		}
		msg.MessageId = id
	}
	if len(msg.MessageId) > 255 {
		return "", fmt.Errorf("dedupamqp: %w: the MessageId is %d bytes; AMQP allows 255", dedup.ErrInvalidKey, len(msg.MessageId))
	}
	if p.injector != nil {
		h := make(amqp.Table, len(msg.Headers)+2)
		maps.Copy(h, msg.Headers)
		p.injector.Inject(ctx, func(k, v string) { h[k] = v })
		msg.Headers = h
	}
	if !p.take(ctx) {
		return msg.MessageId, fmt.Errorf("dedupamqp: wait for the publish in flight: %w", ctx.Err())
	}
	defer func() { <-p.turn }()
	ch, err := p.channel()
	if err != nil {
		return msg.MessageId, err
	}
	reusable, err := ch.publish(ctx, exchange, key, msg)
	if !reusable {
		p.mu.Lock()
		if p.ch == ch {
			p.ch = nil
		}
		p.mu.Unlock()
		ch.close()
	}
	if err != nil {
		return msg.MessageId, fmt.Errorf("dedupamqp: %w", err)
	}
	return msg.MessageId, nil
}

// take takes the turn, waiting for it until ctx ends; a free turn is
// taken whatever ctx. It reports whether it took it.
func (p *Publisher) take(ctx context.Context) bool {
	select {
	case p.turn <- struct{}{}:
		return true
	default:
	}
	select {
	case p.turn <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// channel returns the Publisher's channel, opened when it has none (or
// its last one closed). The caller holds the turn.
func (p *Publisher) channel() (*confirmChannel, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrPublisherClosed
	}
	if p.ch == nil || p.ch.ch.IsClosed() {
		ch, err := openConfirmChannel(p.conn)
		if err != nil {
			return nil, fmt.Errorf("dedupamqp: %w", err)
		}
		p.ch = ch
	}
	return p.ch, nil
}

// Close closes the Publisher's channel (not the connection) once the
// Publish in flight, if any, has its confirm. When ctx ends first, it
// closes the channel under that Publish, which then fails with its outcome
// unknown, and returns ctx's error. Close is idempotent; a Publish after
// it fails with ErrPublisherClosed.
func (p *Publisher) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	var waitErr error
	if p.take(ctx) {
		defer func() { <-p.turn }()
	} else {
		waitErr = ctx.Err()
	}
	p.mu.Lock()
	ch := p.ch
	p.ch = nil
	p.mu.Unlock()
	if ch == nil {
		return waitErr
	}
	// amqp091's Channel.Close may run beside a publish on the channel: the
	// publish's confirm then fails.
	if err := ch.ch.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) {
		return errors.Join(waitErr, fmt.Errorf("dedupamqp: close the publisher's channel: %w", err))
	}
	return waitErr
}

func (p *Publisher) newID(msg amqp.Publishing) (string, error) {
	if p.messageID == nil {
		return outbox.NewMessageID(), nil
	}
	id, err := p.messageID(msg)
	if err != nil {
		return "", fmt.Errorf("dedupamqp: derive the MessageId: %w", err)
	}
	if err := adapter.ValidateID(id, 255); err != nil {
		return "", fmt.Errorf("dedupamqp: derived MessageId: %w", err)
	}
	return id, nil
}
