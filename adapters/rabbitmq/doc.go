// Package dedupamqp runs a dedup.Receiver over a RabbitMQ queue with
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
//	// Start's context bounds the consumer's life: its end without Stop is
//	// a hard stop, logged at error level and reported by Err.
//	err = c.Start(context.Background())
//
//	<-sigCtx.Done() // a signal context (signal.NotifyContext)
//	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
//	defer cancel()
//	err = c.Stop(stopCtx) // a context of its own: finishes what runs, requeues the rest
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
//	Broker          "rabbitmq" ([BrokerRabbitMQ])
//
// [Native] returns the amqp091 delivery behind an envelope. Do not
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
//	Retry        handler error                                             a retry tier, or held and returned in place
//	Retry        store down (fail-closed), in flight elsewhere             held in place and tried again; returned only near ConsumerTimeout
//	DeadLetter   undecodable, no id, invalid id, key reused,
//	             permanent error, attempts exhausted                       publish to DeadLetterExchange (confirmed), then Ack
//
// A retry due later than Options.InPlaceRetryMax (1s) is republished, with
// confirms and mandatory, to the retry tier at least as long as its delay
// (a queue with that x-message-ttl that dead-letters back into the work
// queue, named by adapter.RetryName: "orders.retry.5s"), and the original
// is acknowledged only once the broker confirmed the copy. The tiers of
// 0.1, named by milliseconds ("orders.retry.5000ms"), still send what
// they hold back to the work queue as it expires: leave them until they
// are empty. A shorter retry, or any retry without tiers, is held
// unacknowledged for its delay (at most InPlaceRetryMax) and returned:
// Reject(requeue=true) after a handler failure, Nack(requeue=true) when the
// handler did not run (shutdown). Nothing relies on
// x-death counts or on the delayed-message plugin.
//
// A quorum queue counts returns towards its x-delivery-limit and
// dead-letters the message past it: RabbitMQ 4.0 and later count only
// Reject(requeue=true); before 4.0 Nack(requeue=true) counts too. Start
// reads the broker's version from the connection's server properties and
// logs which rule applies. Whatever the version, a store outage dead-letters
// nothing, and neither does a duplicate that arrives while its original
// runs: a delivery the receiver refused because the store is down or its
// key is in flight elsewhere (its handler did not run) is not returned but
// held, unacknowledged, and handed to the receiver again in place (after
// the receiver's StoreRetryDelay for a store outage; after 200 ms doubling
// up to the holder's remaining lease for a key in flight; Options.Prefetch
// bounds how many are held), each try a delivery of its own, reported as
// a retry. It is returned to the queue (Nack) only when another wait would
// keep it past its arrival plus Options.ConsumerTimeout, less the
// lease and InPlaceRetryMax, where the broker would close the channel; or
// at once when the consumer stops or the connection is lost.
//
// A dead letter is published mandatory with confirms: the broker returns
// one no queue is bound for, and then the original is requeued (after
// StoreRetryDelay, at most InPlaceRetryMax), never acknowledged. It
// carries the original body, properties and headers plus the dead-letter
// headers of package delivery, named alike by every adapter of dedup
// (delivery.HeaderReason, HeaderError, HeaderSource (the queue),
// HeaderKey, HeaderAttempt, HeaderDeliveryCount, HeaderOriginalMessageID,
// HeaderDeadLetteredAt), and [HeaderOriginalExchange] and
// [HeaderOriginalRoutingKey]; a retry tier's copy carries
// [HeaderRetries] and [HeaderRetryReason]. Read them with
// delivery.LookupHeader (over a [TableHeader] of the headers), which also
// finds the names of 0.1 (Dedup-Queue). AMQP table keys are
// case-sensitive. None of the names starts with "x-", which brokers
// reserve (RabbitMQ 3.13 and later ignore x- headers set by clients); the
// copy drops x-delivery-count, which a queue could read as its own. With
// Options.DropPoison instead, poison is rejected without requeue: the
// queue's own dead-letter exchange takes it, if it has one, and then the
// broker's x-death is all the reason there is; a queue without one drops
// it.
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
// counted (Stats().SettleFailures) and logged: a redelivery is coming. A deleted
// queue stops the consumer, logged at error level, with Err matching
// [ErrQueueDeleted] and [ErrStoppedUnasked].
//
// What the caller passes in stays the caller's: the Consumer never closes
// the receiver or its store, a Publisher never closes the connection it was
// given (Close(ctx) closes only its own channel, once the publish in flight
// has its confirm), and Topology.Declare leaves
// the caller's channel open. The Consumer closes only what it made: the
// connections its Dialer opened, and their channels.
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
// The adapter has no callback of its own. Each handing of a message to the
// receiver is one delivery (dedup.Receiver.Deliver, or Refused for a body
// that does not decode), and the receiver's dedup.Config.Observer hears of
// it once, when the consumer settled it, as one delivery.Event: Broker
// "rabbitmq" ([BrokerRabbitMQ]), Source the queue, MessageID and
// DeliveryCount the envelope's, Header its headers, ServerAddress and
// ServerPort the broker's (the host and port of NewConsumer's url when the
// Consumer dials it, else those its connection reached), no ConsumerGroup
// (the messaging conventions give RabbitMQ none), DestinationTemplate
// Options.DestinationTemplate; the receiver's answer, and what was done:
//
//	Ack                 Decision Ack, settled once acknowledged
//	Held in place       Decision Retry (store-unavailable, in-flight), settled when the hold ends and
//	                    the message is handed to the receiver again: each try is a delivery of its
//	                    own, with its own event (SettleDuration 0: nothing is sent to the broker)
//	Returned in place   Decision Retry, Delay the time it was held, settled once rejected or nacked
//	Retry tier          Decision Retry, Delay the tier's, settled once the copy was confirmed and
//	                    the original acknowledged
//	Dead letter         Decision DeadLetter, settled once the dead letter was confirmed and the
//	                    original acknowledged (with DropPoison, once rejected)
//
// SettleDuration is the time spent acknowledging and publishing (not the
// hold before a return), and SettleErr what kept the Decision from being
// carried out: a failed acknowledgement, ErrStaleDelivery, a dead letter
// the broker did not take (matching [ErrDeadLetter]: the original was
// requeued; the receiver does not count it among its dead letters), a
// retry tier that did not take the copy (the delivery was retried in
// place). A delivery that arrived after Stop is returned to the queue
// unhandled and reported as it is: Decision Retry with reason "canceled",
// no key, no status.
//
// The handler, the Observer and the consumer's logs about a delivery get
// the delivery's context (with the span a delivery.DeliveryStarter Observer,
// such as dedupotel's, started), and every log line is written with
// slog's Context methods. Dead letters and retry copies carry the
// delivery's trace context in their headers, written by the Observer when
// it is a delivery.Injector (a header of the same name the original had, the
// producer's traceparent say, takes the new value): the next consumer's
// span links to this delivery's. On the producer side,
// PublisherOptions.Injector does the same with the ctx given to
// [Publisher.Publish]. Warnings go to Options.Logger, by default the
// receiver's logger.
//
// [Consumer.Stats] counts what the Consumer did, in the dedup.ConsumerStats
// shape every adapter shares: Delivered (deliveries the broker handed it;
// a try held in place is not one more), Acked (processed, duplicate,
// bypassed), RetriedInPlace (each try held in place, and each delivery
// returned to the queue after the receiver answered it; not those
// returned unhandled at Stop),
// RetriedLater (copies a retry tier took), DeadLettered (dead letters the
// broker confirmed), PoisonDropped (poison rejected with DropPoison),
// SettleFailures (failed acknowledgements, dead letters and retry copies
// not taken), Reconnects and StaleDeliveries. The
// receiver's Stats counts the dead letters settled without error by
// reason.
//
// # Lifecycle
//
// A nil *Options means all defaults, except where poison goes, which has
// none: NewConsumer refuses options that set neither DeadLetterExchange
// nor DropPoison (nil among them) with an error naming both.
//
// Start connects and starts Options.Concurrency workers consuming with a
// per-channel prefetch of Options.Prefetch. Stop cancels the consumer,
// requeues (Nack) what was prefetched but not started, lets the running
// handlers finish and settle, closes the connections and returns; at
// its ctx's deadline it cancels the handlers (their deliveries are
// requeued) and returns ctx's error. Stopped is closed once everything is
// gone. Start's context bounds the consumer's life: when it ends without
// Stop, that is a hard stop (the handlers' contexts cancelled, their
// deliveries requeued), logged at error level, and Err returns an error
// matching [ErrStoppedUnasked] that wraps context.Cause of that context.
// Give Start a context that lasts as long as the consumer, and Stop a
// context of its own.
package dedupamqp
