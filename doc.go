// Package dedup makes at-least-once message delivery safe: whatever the
// broker redelivers and whatever a producer publishes twice, the handler has
// its effect once per message, duplicates are answered with the first
// result, and no message is lost on the way.
//
// # Receiver
//
// A [Receiver] wraps the handler. Each message gets a key (namespace, ':',
// the id a [KeyFunc] finds: package idstrategy has ready-made ones), and the
// key moves through the states of one record in a [Store]:
//
//	           Acquire                 Complete(token)
//	(absent) ----------> processing --------------------> completed (result kept for Retention)
//	     ^                 |   |  lease expires: the next Acquire takes over, attempt+1, new token
//	     |  Release(token) |   +--------------------------------------+
//	     +---- failed <----+  (attempts, last error; the next Acquire retries)
//
// Claiming is one atomic step in the store, never "check, then set". A claim
// holds the key for a lease (Config.Lease) that the receiver extends while
// the handler works, so a crashed worker never blocks a key for long. Each
// claim gets a fresh [Token]; a worker whose lease was taken over cannot
// store its result ([ErrLeaseLost]), so a slow worker never overwrites a
// newer one's record.
//
//	rcv, err := dedup.NewReceiver(store, keyFunc, handler, &dedup.Config{Namespace: "billing"})
//	res, err := rcv.Handle(ctx, msg) // res.Status: processed, duplicate, in-flight or bypassed
//
// A duplicate is a status, not an error. Errors are for what the caller must
// act on, and all of them match with errors.Is or errors.As: the handler's
// error ([*HandlerError], [*PanicError]), [ErrNoKey] and [ErrInvalidKey]
// (poison), [ErrKeyReused], [ErrAttemptsExhausted], [ErrStoreUnavailable]
// ([*StoreError]), [ErrLeaseLost] and [ErrResultNotStored].
//
// # Decisions
//
// [Decide] maps every outcome to [Ack], [Retry] after a delay, or
// [DeadLetter] with a [Reason]. Every broker adapter uses it, so the same
// situation gets the same answer on RabbitMQ, Kafka and NATS. The rule that
// matters most: once the handler has succeeded, the delivery is
// acknowledged, even if its result could not be stored, because a
// redelivery would repeat the effect.
//
// # Concurrency and failures
//
// Concurrent deliveries of one key inside one process wait for the first
// (singleflight) and share its result. A store that can answer from memory
// ([Peeker]) answers duplicates without a lock on the receiver and without
// I/O. A panicking handler is recovered and its claim released as failed.
// When the store is down, the receiver is fail-closed by default (the
// handler does not run, the delivery is retried); Config.FailOpen runs it
// unprotected instead, with status [StatusBypassed].
//
// # Stores
//
// store/memstore is an in-process LRU (single process only). Every store
// passes the conformance suite in store/storetest, which pins the rules
// above; run it against your own store too.
package dedup
