// Package dedupwatermill gives a Watermill router dedup's guarantees with
// one message.HandlerMiddleware, over whatever pub/sub the router runs
// (watermill-amqp, watermill-sql, Kafka, Redis Streams...): each message's
// handler has its effect once per message id, a duplicate gets back the
// messages the first delivery produced (same UUIDs, metadata and
// payloads), and a message whose handler failed runs again. Import it
// under its own name:
//
//	import dedupwatermill "github.com/dedup-go/dedup/middleware/watermill"
//
//	mw, err := dedupwatermill.New(store, &dedupwatermill.Options{
//		Config: &dedup.Config{Namespace: "billing"},
//	})
//	poison, err := middleware.PoisonQueueWithFilter(pub, "poison", dedupwatermill.IsPoison)
//	router.AddMiddleware(poison, mw.Middleware, middleware.Retry{MaxRetries: 3}.Middleware)
//
// The store is any of dedup's: memstore for one process, redisstore,
// rueidisstore, pgstore or mysqlstore across router instances.
//
// # Keys
//
// Options.Key finds a message's id: its UUID by default ([FromUUID]), or
// a metadata value ([FromMetadata]), the payload's hash ([PayloadHash]),
// or any dedup.KeyFunc of a *message.Message composed with package
// idstrategy. The record's id is that id scoped by Options.Scope (the
// topic the handler subscribes to, by default: two handlers of one router
// on different topics never answer each other), in the receiver's
// Namespace; [RecordID] spells it out for dedupctl. A message without a
// usable id is poison.
//
// # What the handler's answer becomes
//
// A Watermill handler says nil (ack) or an error (nack); the router
// publishes what it produced, then acks. The middleware maps the
// receiver's decision onto that:
//
//	processed                      the handler's messages, kept in the record first; nil error
//	duplicate of a completed id    the kept messages, fresh copies with the same UUIDs; nil error
//	bypassed (FailOpen, store down) the handler's messages, unprotected; nil error
//	handler error, attempts left   the key released as failed; the receiver's Backoff
//	                               held in the handler (up to MaxHold); then the error (nack)
//	in flight elsewhere            held in place, looked at again after the receiver's
//	                               delay (200 ms, doubling, up to the holder's remaining
//	                               lease), until MaxHold; then ErrInFlight (nack). Never acked.
//	store unavailable, fail-closed held in place, asked again after StoreRetryDelay, until
//	                               MaxHold; then the store's error (nack)
//	dead letter (permanent error,  a *PoisonError (matches ErrPoison and the cause), with the
//	attempts exhausted, no id,     Dedup-* metadata (delivery.Header*) set on the message
//	invalid id, id reused)
//	duplicate whose messages       a *PoisonError matching ErrResultNotKept
//	were not kept (MaxResultSize)
//
// Holding in the handler paces what a plain nack would not: watermill-amqp
// requeues a nacked message at once, so a nack alone would spin. A Nack
// (basic.nack) does not count towards a RabbitMQ quorum queue's delivery
// limit on 3.13 and 4.x; MaxAttempts is what ends a failing message.
//
// # Poison queue
//
// Dead letters reach Watermill's poison queue through
// middleware.PoisonQueueWithFilter with [IsPoison]: the middleware does not
// publish them itself. Use the filter: a plain PoisonQueue would also park
// a message in flight elsewhere, a store outage and a handler error with
// attempts left, which the middleware nacks to have them redelivered. The
// poison queue publishes the message with its metadata: its own
// reason_poisoned, topic_poisoned, handler_poisoned, and the middleware's
// Dedup-Reason, Dedup-Error, Dedup-Key, Dedup-Attempt, Dedup-Source,
// Dedup-Original-Message-Id, Dedup-Dead-Lettered-At.
//
// # Chaining order
//
// First added, outermost:
//
//	router.AddMiddleware(
//		poisonQueue,    // outside: sees the middleware's PoisonError
//		mw.Middleware,  // claims the id, keeps the produced messages
//		retry,          // inside: retries run under one claim, one attempt
//		// Recoverer is not needed inside: the receiver recovers the handler's
//		// panics and releases the key.
//	)
//
// Watermill's Retry outside the middleware works too, but each retry is
// then an attempt of its own towards MaxAttempts. Give Retry a ShouldRetry
// that skips dedup.IsPermanent errors, or a permanent error is retried
// before it is dead-lettered. Watermill's Deduplicator must not be chained
// with it: it would drop the redelivery of a failed message (see
// docs/watermill.md).
//
// # Produced messages are the result
//
// The record keeps what the handler returned, encoded (UUID, metadata,
// payload of each message), up to MaxResultSize (Options.Config's; 1 MiB
// by default here). A duplicate gets those messages back and the router
// publishes them again with the same UUIDs, so that the next consumer (with
// this middleware too) deduplicates them: consume, transform, produce,
// effectively once end to end. Produced messages larger than MaxResultSize
// still complete the record (the handler never runs again for the id) and
// the first delivery publishes them, but they are not kept: the middleware
// logs a warning, and a later duplicate is poison with ErrResultNotKept
// rather than acknowledged without them.
//
// # Observability
//
// Config.Observer hears one delivery.Event per hand-over to the receiver
// (a retry held in place is a delivery of its own): Origin.Broker
// "watermill", Source and DestinationTemplate the subscribed topic,
// ConsumerGroup the handler's name, MessageID the UUID, Header the
// metadata. As for the HTTP and gRPC middleware, the event carries the
// receiver's Decision and Settled is false: what the router does with the
// answer is the router's. The dedupotel Observer turns events into spans
// and metrics. The handler runs with the receiver's context set on the
// message (msg.Context()), cancelled with dedup.ErrLeaseLost as its cause
// when the lease is lost; the message's own context is restored after.
package dedupwatermill
