// Package rabbitmq runs a dedup.Receiver over a RabbitMQ queue with
// github.com/rabbitmq/amqp091-go: a managed [Consumer] that settles every
// delivery from the receiver's decision and owns its connections, a
// [Topology] that declares a work queue with its dead-letter exchange and
// retry tiers in one call, and a [Publisher] that gives every message a
// MessageId and waits for the broker's confirm. Import it next to the AMQP
// client under an alias:
//
//	import (
//		amqp "github.com/rabbitmq/amqp091-go"
//
//		"github.com/dedup-go/dedup"
//		dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
//		"github.com/dedup-go/dedup/idstrategy"
//	)
//
//	top := dedupamqp.Topology{Queue: "orders", Type: dedupamqp.Quorum, RetryTiers: []time.Duration{5 * time.Second, time.Minute}}
//	err := top.Declare(ctx, ch)
//	rcv, err := dedup.NewReceiver(store, idstrategy.BodyField("id", func(o Order) string { return o.ID }), charge,
//		&dedup.Config{Namespace: "billing"})
//	c, err := dedupamqp.NewConsumer("amqp://guest:guest@127.0.0.1:5672/", "orders", rcv, top.Options())
//	err = c.Start(ctx)
//	defer c.Stop(ctx)
//
// # The envelope
//
// The consumer decodes each body (with dedup.JSONDecoder unless
// Options.Decoder says otherwise) and hands the receiver a
// *dedup.Message[T], the envelope every adapter of dedup fills:
//
//	Body, Data      the decoded body and the body as delivered
//	Header          the AMQP headers table ([TableHeader], not copied; values as text); nil without any
//	ID              the MessageId property
//	Source          the queue
//	DeliveryCount   a quorum queue's x-delivery-count + 1 (1 on the first delivery);
//	                on a classic queue 1, or 0 (unknown) once redelivered
//	Redelivered     the redelivered flag (or a delivery count above 1)
//	Timestamp       the Timestamp property, the producer's
//	Broker          "rabbitmq" ([Broker])
//
// [DeliveryOf] returns the amqp091 delivery behind an envelope. Do not
// acknowledge it: the consumer does, on the channel it came from, once the
// outcome is recorded. A body that does not decode never reaches the
// receiver: it is poison, dead-lettered with reason "undecodable".
//
// # Ids
//
// Any dedup.KeyFunc[*dedup.Message[T]] works; package idstrategy has the
// strategies for the envelope, the same on every broker: MessageID (the
// AMQP message-id), MessageHeader (any header, a number as its text),
// DataHash (SHA-256 of the body) and BodyField (a field of the decoded
// body), and combinators over them. Key on an id every copy carries: a
// producer that republishes under a fresh MessageId is caught only by a key
// from the body.
//
// # Decisions
//
// Every outcome goes through the receiver's Decide, and the consumer
// settles the delivery on its own channel:
//
//	Ack          processed, duplicate, bypassed, done but not stored     Ack(multiple=false)
//	Retry        handler error, in flight elsewhere, store down            a retry tier, or held and returned in place
//	DeadLetter   undecodable, no id, invalid id, key reused,
//	             permanent error, attempts exhausted                       publish to DeadLetterExchange (confirmed), then Ack
//
// A retry due later than Options.InPlaceRetryMax (1s) is republished, with
// confirms and mandatory, to the retry tier at least as long as its delay
// (a queue with that x-message-ttl that dead-letters back into the work
// queue), and the original is acknowledged only once the broker confirmed
// the copy. A shorter retry, or any retry without tiers, is held
// unacknowledged for its delay (at most InPlaceRetryMax) and returned:
// Reject(requeue=true) after a handler failure, which RabbitMQ counts
// towards a quorum queue's x-delivery-limit (RabbitMQ 4 stopped counting
// Nack); Nack(requeue=true) when the handler did not run (in flight
// elsewhere, store down, shutdown). Nothing relies on x-death counts or on
// the delayed-message plugin.
//
// A dead letter is published mandatory with confirms: the broker returns
// one no queue is bound for, and then the original is requeued (after
// StoreRetryDelay, at most InPlaceRetryMax), never acknowledged. It
// carries the original body, properties and headers plus dedup-reason,
// dedup-error, dedup-queue, dedup-key, dedup-attempt,
// dedup-delivery-count and dedup-original-exchange, -routing-key and
// -message-id. None of them starts with "x-", which brokers reserve
// (RabbitMQ 3.13 and later ignore x- headers set by clients); the copy
// drops x-delivery-count, which a queue could read as its own. With
// Options.RejectDeadLetters instead, poison is rejected without requeue to
// the queue's own dead-letter exchange, and then the broker's x-death is
// all the reason there is.
//
// # Connections
//
// amqp091-go leaves recovery to the application, and its opt-in
// Config.Recovery reuses the *Channel across a reconnect, where delivery
// tags of the old channel would acknowledge other messages. The Consumer
// therefore owns its connections (see [Dialer]; never enable Recovery on
// them): one to consume and settle on, one to publish retries and dead
// letters on. It watches both connections, the channel, the consumer's
// cancellation (a deleted queue) and the deliveries; on a loss it cancels
// the handlers' contexts, retires the session so that none of its
// deliveries is settled anywhere (they come back from the broker, and the
// store answers them), reconnects with Options.ReconnectBackoff, sets the
// per-channel prefetch again and resumes. A failed acknowledgement is
// counted (Stats.AckFailures) and logged: a redelivery is coming. A deleted
// queue stops the consumer with Err matching [ErrQueueDeleted].
//
// # Horizon check
//
// AMQP 0.9.1 cannot read the broker's consumer_timeout or a queue's
// arguments, so the consumer does not guess them. At Start it checks the
// receiver's lease (plus InPlaceRetryMax) against Options.ConsumerTimeout
// (30 minutes, RabbitMQ's default) and the receiver's retention against
// the longest retry tier, and logs a warning, or with
// Options.StrictHorizon fails with [ErrHorizon]. It checks with passive
// declarations that the dead-letter exchange and every retry tier's queue
// exist, and fails otherwise.
//
// # Observing
//
// After settling each delivery the consumer reports a dedup.EventSettled
// event (broker, queue, message id, delivery count, key, status, attempt,
// decision, error) to the receiver's dedup.Config.Observer. Its warnings
// go to Options.Logger, by default the receiver's logger. [Consumer.Stats]
// counts reconnects, failed acknowledgements, stale deliveries, dead
// letters and retries.
//
// # Lifecycle
//
// Start connects and starts Options.Concurrency workers consuming with a
// per-channel prefetch of Options.Prefetch. Stop cancels the consumer,
// requeues (Nack) what was prefetched but not started, lets the running
// handlers finish and settle, closes the connections and returns; at
// ctx's deadline it cancels the handlers (their deliveries are requeued)
// and returns ctx's error. Stopped is closed once everything is gone.
// Cancelling Start's context is a hard stop.
package rabbitmq
