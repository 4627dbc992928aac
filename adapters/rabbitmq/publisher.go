package dedupamqp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
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

	mu sync.Mutex
	ch *confirmChannel
}

// PublisherOptions configure a Publisher; nil means the defaults.
type PublisherOptions struct {
	// MessageID derives the MessageId of a message published without one:
	// a key strategy over amqp.Publishing, such as
	// idstrategy.ContentHash(func(p amqp.Publishing) ([]byte, error) {
	// return p.Body, nil }), so that the same body published twice carries
	// the same id. Defaults to nil: a fresh random id (NewMessageID) per
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
	p := &Publisher{conn: conn}
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
// the same MessageId, which consumers deduplicate on.
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
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch == nil || p.ch.ch.IsClosed() {
		ch, err := openConfirmChannel(p.conn)
		if err != nil {
			return "", fmt.Errorf("dedupamqp: %w", err)
		}
		p.ch = ch
	}
	reusable, err := p.ch.publish(ctx, exchange, key, msg)
	if !reusable {
		p.ch.close()
		p.ch = nil
	}
	if err != nil {
		return msg.MessageId, fmt.Errorf("dedupamqp: %w", err)
	}
	return msg.MessageId, nil
}

// Close closes the Publisher's channel (not the connection).
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch == nil {
		return nil
	}
	err := p.ch.ch.Close()
	p.ch = nil
	if errors.Is(err, amqp.ErrClosed) {
		return nil
	}
	return err
}

func (p *Publisher) newID(msg amqp.Publishing) (string, error) {
	if p.messageID == nil {
		return NewMessageID(), nil
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

// NewMessageID returns a fresh random message id: 32 hex digits (128
// bits). Set it on a message before its first publish, and keep it for
// every retry of that publish.
func NewMessageID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}
