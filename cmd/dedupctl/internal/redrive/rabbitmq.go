package redrive

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/delivery"
)

// RabbitMQConfig says where a RabbitMQ source reads.
type RabbitMQConfig struct {
	// URL is the broker's, amqp://user:password@host:5672/vhost.
	URL string
	// Queue is the dead-letter queue.
	Queue string
	// Timeout bounds the connection's dial and handshake.
	Timeout time.Duration
}

// RabbitMQ reads the dead letters of a queue with basic.get, one at a
// time, and holds each unacknowledged until it is removed (acknowledged) or
// the pass ends: a letter left in place stays held, so that the pass never
// meets it again, and goes back to the queue when the pass closes its
// channel (or its connection dies with the process). A pass reads at most
// the letters the queue held when it began.
//
// A copy goes to the queue the letter names (Dedup-Source, or Dedup-Queue
// on a letter of dedupamqp 0.1; x-death's queue for the broker's own dead
// letters) through the default exchange, not to
// the exchange the producer used: a fanout or topic exchange would hand a
// copy to every queue bound to it, and only one of them dead-lettered the
// message. It is published mandatory, on a channel in confirm mode, and
// waited for.
type RabbitMQ struct {
	conn    *amqp.Connection
	get     *amqp.Channel
	pub     *amqp.Channel
	returns chan amqp.Return
	queue   string
	size    int
	seen    int
}

var _ Source = (*RabbitMQ)(nil)

// rabbitLetter is what a RabbitMQ letter keeps for republishing and
// removal.
type rabbitLetter struct {
	d     amqp.Delivery
	queue string // where the copy goes
	// exchange and routingKey are where the producer published it, from
	// x-death, for a broker's letter; the adapter's carry their own.
	exchange, routingKey string
}

// NewRabbitMQ connects to cfg.URL and begins a pass over cfg.Queue. The
// error of an unreachable broker names its address; one of a queue that
// does not exist matches ErrNotFound.
func NewRabbitMQ(_ context.Context, cfg RabbitMQConfig) (*RabbitMQ, error) {
	where := "RabbitMQ " + redactURL(cfg.URL)
	conn, err := amqp.DialConfig(cfg.URL, amqp.Config{
		Dial:       amqp.DefaultDial(cfg.Timeout),
		Heartbeat:  10 * time.Second,
		Properties: amqp.Table{"connection_name": "dedupctl redrive"},
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	r := &RabbitMQ{conn: conn, queue: cfg.Queue}
	fail := func(err error) (*RabbitMQ, error) {
		_ = conn.Close()
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if r.get, err = conn.Channel(); err != nil {
		return fail(err)
	}
	q, err := r.get.QueueDeclarePassive(cfg.Queue, false, false, false, false, nil)
	var ae *amqp.Error
	switch {
	case errors.As(err, &ae) && ae.Code == amqp.NotFound:
		return fail(fmt.Errorf("%w: queue %q", ErrNotFound, cfg.Queue))
	case err != nil:
		return fail(fmt.Errorf("queue %q: %w", cfg.Queue, err))
	}
	r.size = q.Messages
	if r.pub, err = conn.Channel(); err != nil {
		return fail(err)
	}
	if err := r.pub.Confirm(false); err != nil {
		return fail(fmt.Errorf("confirm mode: %w", err))
	}
	// One publish in flight at a time: a return in the buffer once its
	// confirm arrived is that publish's (RabbitMQ sends basic.return before
	// basic.ack, and amqp091 hands it over first).
	r.returns = r.pub.NotifyReturn(make(chan amqp.Return, 1))
	return r, nil
}

// Next gets the next letter, or ErrEnd once the queue held no more or
// the pass read as many as the queue held when it began.
func (r *RabbitMQ) Next(context.Context) (*Letter, error) {
	if r.seen >= r.size {
		return nil, ErrEnd
	}
	d, ok, err := r.get.Get(r.queue, false)
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return nil, ErrEnd
	}
	r.seen++
	return rabbitLetterOf(d), nil
}

func rabbitLetterOf(d amqp.Delivery) *Letter {
	h := d.Headers
	// The adapter's headers, read by their names now or before 1.0: a
	// letter of 0.1 says Dedup-Queue where one of now says Dedup-Source.
	dh := dedupamqp.TableHeader(h)
	l := &Letter{
		ID:        strconv.FormatUint(d.DeliveryTag, 10),
		MessageID: d.MessageId,
		Header:    func(name string) (string, bool) { return tableString(h, name) },
		Body:      d.Body,
	}
	rl := rabbitLetter{d: d}
	if reason, ok := delivery.LookupHeader(dh, delivery.HeaderReason); ok {
		l.Marking, l.Reason = ByAdapter, reason
		l.Key, _ = delivery.LookupHeader(dh, delivery.HeaderKey)
		l.Error, _ = delivery.LookupHeader(dh, delivery.HeaderError)
		rl.queue, _ = delivery.LookupHeader(dh, delivery.HeaderSource)
		if at, ok := delivery.LookupHeader(dh, delivery.HeaderDeadLetteredAt); ok {
			l.Time, _ = time.Parse(time.RFC3339, at) // milliseconds are read too
		}
	} else if death, ok := lastDeath(h); ok {
		l.Marking = ByBroker
		l.Reason, _ = tableString(death, "reason")
		rl.queue, _ = tableString(death, "queue")
		rl.exchange, _ = tableString(death, "exchange")
		if keys, ok := death["routing-keys"].([]any); ok && len(keys) > 0 {
			rl.routingKey, _ = keys[0].(string)
		}
		l.Time, _ = death["time"].(time.Time)
	}
	if rl.queue != "" {
		l.To = "queue " + rl.queue
	}
	l.handle = rl
	return l
}

// lastDeath returns the latest entry of x-death: the broker keeps the
// most recent first.
func lastDeath(h amqp.Table) (amqp.Table, bool) {
	deaths, ok := h["x-death"].([]any)
	if !ok || len(deaths) == 0 {
		return nil, false
	}
	t, ok := deaths[0].(amqp.Table)
	return t, ok
}

// tableString reads a string (or bytes) value of an AMQP table.
func tableString(t amqp.Table, key string) (string, bool) {
	switch v := t[key].(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	}
	return "", false
}

// Republish publishes the original to its queue and waits for the
// confirm; a copy the broker returns (the queue is gone) or nacks is
// refused.
func (r *RabbitMQ) Republish(ctx context.Context, l *Letter) error {
	rl := l.handle.(rabbitLetter)
	d := rl.d
	p := amqp.Publishing{
		Headers:         restoredAMQPHeaders(d.Headers, rl),
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    d.DeliveryMode,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		Expiration:      d.Expiration,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		UserId:          d.UserId,
		AppId:           d.AppId,
		Body:            d.Body,
	}
	dc, err := r.pub.PublishWithDeferredConfirmWithContext(ctx, "", rl.queue, true, false, p)
	if err != nil {
		return err
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("the confirm: %w", err)
	}
	select {
	case ret, ok := <-r.returns:
		if ok {
			return fmt.Errorf("%w: queue %q: returned %d %s", ErrRefused, rl.queue, ret.ReplyCode, ret.ReplyText)
		}
	default:
	}
	switch {
	case acked:
		return nil
	case r.pub.IsClosed():
		return fmt.Errorf("queue %q: the publishing channel closed", rl.queue)
	default:
		return fmt.Errorf("%w: queue %q: the broker nacked the copy", ErrRefused, rl.queue)
	}
}

// restoredAMQPHeaders are the original's headers: the letter's without the
// Dedup-* headers and the broker's dead-lettering ones (x-death, and a
// client-set x-delivery-count would be read as the broker's before
// RabbitMQ 3.13). Dedup-Original-Exchange and -Routing-Key stay (set from
// x-death for a broker's letter): they say where the producer published
// it, which a copy sent through the default exchange no longer shows, and
// the adapter carries them over its own trips.
func restoredAMQPHeaders(h amqp.Table, rl rabbitLetter) amqp.Table {
	out := amqp.Table{}
	for k, v := range h {
		switch {
		case k == dedupamqp.HeaderOriginalExchange, k == dedupamqp.HeaderOriginalRoutingKey:
		case hasPrefixFold(k, "Dedup-"), k == "x-death", k == "x-delivery-count",
			strings.HasPrefix(k, "x-first-death-"), strings.HasPrefix(k, "x-last-death-"):
			continue
		}
		out[k] = v
	}
	if _, ok := out[dedupamqp.HeaderOriginalExchange]; !ok && rl.queue != "" && (rl.exchange != "" || rl.routingKey != "") {
		out[dedupamqp.HeaderOriginalExchange] = rl.exchange
		out[dedupamqp.HeaderOriginalRoutingKey] = rl.routingKey
	}
	return out
}

// Remove acknowledges the letter.
func (r *RabbitMQ) Remove(_ context.Context, l *Letter) error {
	return l.handle.(rabbitLetter).d.Ack(false)
}

// Leave holds the letter until the pass ends.
func (r *RabbitMQ) Leave(context.Context, *Letter) error { return nil }

// Size is how many letters the queue held when the pass began.
func (r *RabbitMQ) Size() int64 { return int64(r.size) }

// Close closes the connection, which puts the letters held back in the
// queue: a close, not a reject or nack with requeue, which a quorum queue
// would count toward its delivery limit.
func (r *RabbitMQ) Close(context.Context) error {
	return r.conn.Close()
}
