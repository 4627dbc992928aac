package dedupamqp

import (
	"errors"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
)

// Headers of RabbitMQ's own concepts that the Consumer adds to dead
// letters and retry copies, next to the delivery.Header* names every
// adapter writes (delivery.HeaderReason, HeaderError, HeaderSource (the
// queue), HeaderKey, HeaderAttempt, HeaderDeliveryCount,
// HeaderOriginalMessageID, HeaderDeadLetteredAt). AMQP table keys are
// case-sensitive: these are the exact names. None starts with "x-":
// brokers reserve that prefix, and RabbitMQ 3.13 and later ignore x-
// headers set by clients.
const (
	// HeaderOriginalExchange and HeaderOriginalRoutingKey are where the
	// producer published the message: a retry tier brings it back through
	// the default exchange, and dedupctl redrive sends a dead letter's copy
	// there too, so the message's own exchange and routing key no longer
	// tell. Set on the first trip, kept on the later ones.
	HeaderOriginalExchange   = "Dedup-Original-Exchange"
	HeaderOriginalRoutingKey = "Dedup-Original-Routing-Key"
	// HeaderRetries counts the trips through retry tiers: a message comes
	// back from one as a new message, with a delivery count of 1.
	HeaderRetries = "Dedup-Retries"
	// HeaderRetryReason is the reason of the last trip through a retry tier.
	HeaderRetryReason = "Dedup-Retry-Reason"
)

// deadLetteredAtLayout is the layout of delivery.HeaderDeadLetteredAt.
const deadLetteredAtLayout = "2006-01-02T15:04:05.000Z07:00"

// republished copies d's properties and body into a new message with a
// copy of its headers, less the ones the broker sets per delivery. A
// client-set x-delivery-count would be read as the broker's on a queue
// that keeps it (RabbitMQ before 3.13).
func republished(d *amqp.Delivery) amqp.Publishing {
	h := make(amqp.Table, len(d.Headers)+8)
	for k, v := range d.Headers {
		if k != headerDeliveryCount {
			h[k] = v
		}
	}
	// Where the producer published it: a retry tier brings it back through
	// the default exchange, so only the first trip knows.
	if _, ok := h[HeaderOriginalExchange]; !ok {
		h[HeaderOriginalExchange] = d.Exchange
		h[HeaderOriginalRoutingKey] = d.RoutingKey
	}
	return amqp.Publishing{
		Headers:         h,
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
}

// retryPublishing is d on its way to a retry tier.
func retryPublishing(d *amqp.Delivery, dec delivery.Decision) amqp.Publishing {
	p := republished(d)
	n, _ := headerInt(d.Headers, HeaderRetries)
	p.Headers[HeaderRetries] = max(n, 0) + 1
	p.Headers[HeaderRetryReason] = string(dec.Reason)
	return p
}

// deadLetterPublishing is d as a dead letter: the original body,
// properties (MessageId included) and headers, plus the dedup-* headers
// saying why.
func deadLetterPublishing[R any](d *amqp.Delivery, queue string, deliveries int, res dedup.Result[R], dec delivery.Decision) amqp.Publishing {
	p := republished(d)
	h := p.Headers
	h[delivery.HeaderReason] = string(dec.Reason)
	if dec.Err != nil {
		h[delivery.HeaderError] = oneLine(dec.Err.Error())
	}
	h[delivery.HeaderSource] = queue
	if res.Key != "" {
		h[delivery.HeaderKey] = res.Key
	}
	attempt := res.Attempt
	var he *dedup.HandlerError
	if errors.As(dec.Err, &he) && he.Attempt > 0 {
		attempt = he.Attempt
	}
	if attempt > 0 {
		h[delivery.HeaderAttempt] = int64(attempt)
	}
	h[delivery.HeaderDeliveryCount] = int64(deliveries)
	h[delivery.HeaderDeadLetteredAt] = time.Now().UTC().Format(deadLetteredAtLayout)
	if d.MessageId != "" {
		h[delivery.HeaderOriginalMessageID] = d.MessageId
	}
	return p
}

// oneLine keeps a header value on one line and bounded: a panic's stack
// does not belong in a header.
func oneLine(s string) string {
	const limit = 1024
	out := make([]byte, 0, min(len(s), limit))
	for i := 0; i < len(s) && len(out) < limit; i++ {
		c := s[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		out = append(out, c)
	}
	return string(out)
}
