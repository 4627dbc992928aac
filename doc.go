// Package dedup makes at-least-once message delivery safe: whatever the
// broker redelivers and whatever a producer publishes twice, the handler has
// its effect once per message, duplicates are answered with the first
// result, and no message is lost on the way.
//
// # Receiver
//
// A [Receiver] wraps the handler. Each message gets a key (the receiver's
// namespace, ':', the id a [KeyFunc] finds: package idstrategy has
// ready-made ones), and the key's record in a store moves from processing
// to completed (or failed, and retried):
//
//	type Order struct{ ID string }
//	store, err := memstore.New(nil) // one process; redisstore shares records between replicas
//	if err != nil {
//		return err
//	}
//	charge := func(ctx context.Context, m *dedup.Message[Order]) (string, error) {
//		return "charged " + m.Body.ID, nil // the effect: once per order id
//	}
//	rcv, err := dedup.NewReceiver(store, idstrategy.BodyField("id", func(o Order) string { return o.ID }), charge,
//		&dedup.Config{Namespace: "billing"})
//	if err != nil {
//		return err
//	}
//	msg := &dedup.Message[Order]{Body: Order{ID: "o-1"}} // a broker adapter builds it from a delivery
//	// The broker delivers it twice:
//	for range 2 {
//		res, err := rcv.Handle(ctx, msg) // res.Status: processed, duplicate, in-flight or bypassed
//		if err != nil {
//			return err // not done: the broker is to redeliver it
//		}
//		fmt.Println(res.Status, res.Value)
//	}
//	return nil
//
// It prints "processed charged o-1", then "duplicate charged o-1":
// the handler ran once. The snippet is the body of a function with a ctx
// that returns an error; the package's Example runs it as written.
//
// Claiming a key is one atomic step in the store, never "check, then set".
// A claim holds the key for a lease (Config.Lease) that the receiver
// extends while the handler works, so a crashed worker never blocks a key
// for long, and a worker whose lease was taken over cannot overwrite the
// newer one's record ([ErrLeaseLost]).
//
// A duplicate is a status, not an error, and so is every other done
// status: when the effect happened (processed, duplicate, bypassed), Handle
// returns a nil error, so `if err != nil { retry }` never repeats an
// effect. What went wrong beside it (a result that could not be stored) is
// [Result].Problem. Errors are for what the caller must act on, and all of
// them match with errors.Is or errors.As: the handler's error
// ([*HandlerError], [*PanicError]), [ErrNoKey] and [ErrInvalidKey]
// (poison), [ErrKeyReused], [ErrAttemptsExhausted], [ErrStoreUnavailable]
// and [ErrCanceled].
//
// # One envelope for every broker
//
// Broker adapters (adapters/nats, adapters/rabbitmq, adapters/kafka) decode
// each body and hand the receiver a [*Message]: the decoded Body beside the
// raw Data, headers behind one lookup API, the broker's message id, source,
// stream position and delivery count, with the same conventions on every
// broker. One receiver and one handler of *dedup.Message[Order] serve a
// NATS consumer and a Kafka consumer at the same time.
//
// # Decisions
//
// Every adapter maps every outcome the same way (adapter.Receiver.Decide),
// to an ack, a retry after a delay, or a dead letter with a reason (the
// vocabulary of package delivery), so the same situation gets the same
// answer on RabbitMQ, Kafka and NATS. The rule that matters most: once the
// handler has succeeded, the delivery is acknowledged, even if its result
// could not be stored, because a redelivery would repeat the effect.
//
// # Two audiences
//
// This package is what an application developer touches. What an adapter,
// a middleware or a message type of one's own needs (handing deliveries
// over and settling them, a message's origin and heartbeat, decoding
// bodies) is package adapter, with its conformance suite
// adapter/adaptertest; what an Observer sees is package delivery.
//
// # Concurrency and failures
//
// Concurrent deliveries of one key inside one process wait for the first
// and share its result (or, with Config.NoWait, each asks the store at
// once: in flight while the key is held, replayed once completed); a
// handler that calls Handle for its own key gets in flight. Every piece of
// user code the receiver calls (handler, key func, codec,
// Fingerprint, Heartbeat, Backoff, Observer) is recovered: a panic before
// the effect is an error, one after it completes the record without its
// result. The completion of a success runs detached from the caller's
// context, so a shutdown cannot lose it. When the store is down, the
// receiver is fail-closed by default (the handler does not run, the
// delivery is retried); Config.FailOpen runs it unprotected instead, with
// status bypassed (delivery.StatusBypassed), logged.
//
// # Observing
//
// Config.Observer hears of every delivery the receiver handles and of what
// each adapter did with it (a delivery.Event); Config.Logger (slog.Default() unless
// set) hears of everything a user must see: bypasses, completions that
// failed, lost leases, recovered panics.
//
// # Stores
//
// store/memstore is an in-process LRU (single process only),
// store/redisstore keeps records in Redis, and store/tieredstore puts a
// memstore in front of a remote store so duplicates are answered without a
// round trip. The store contract lives in package store; every store
// passes store/storetest.
package dedup
