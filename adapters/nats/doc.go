// Package nats runs a dedup.Receiver over NATS: JetStream pull consumers
// ([Consumer]) and core NATS subscriptions, plain or in a queue group
// ([Subscriber]). Import it next to the NATS client under an alias:
//
//	import (
//		"github.com/nats-io/nats.go/jetstream"
//		dedupnats "github.com/dedup-go/dedup/adapters/nats"
//	)
//
//	rcv, err := dedup.NewReceiver(store, dedupnats.BodyField("id", func(o Order) string { return o.ID }), charge,
//		&dedup.Config{Namespace: "billing"})
//	c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DeadLetterSubject: "dlq.orders"})
//	err = c.Start(ctx)
//	defer c.Stop(ctx)
//
// # The envelope
//
// The adapter decodes each body (JSON by default; see [Decoder] and [Raw])
// and hands the receiver a [*Msg]: the subject, headers and data, the
// decoded Body, and for JetStream the stream, sequence and delivery count.
// A key strategy can use either side without decoding twice. A body that
// does not decode never reaches the receiver: it is poison, dead-lettered
// with reason "undecodable".
//
// # Ids
//
// [MsgID] (the Nats-Msg-Id header), [Header], [StreamSequence],
// [ContentHash] (SHA-256 of the data) and [BodyField] (a field of the
// decoded body). Any dedup.KeyFunc[*Msg[T]] works, including the package
// idstrategy combinators. Key on the id the producer puts in every copy:
// a copy republished without Nats-Msg-Id slips past JetStream's duplicate
// window, but not past its order id.
//
// # Decisions on JetStream
//
// Every outcome goes through dedup.Decide:
//
//	Ack          processed, duplicate, bypassed, or done but not stored   Ack (DoubleAck with Options.AckSync)
//	Retry        in flight elsewhere, handler error, store down (fail-closed), shutdown   NakWithDelay(delay)
//	DeadLetter   undecodable, no id, invalid id, key reused, permanent error, attempts exhausted   publish to DeadLetterSubject, then Term
//
// A retry on the consumer's last delivery (NumDelivered = MaxDeliver) is
// dead-lettered with [ReasonMaxDeliver] instead, since JetStream would not
// deliver it again. The dead letter is published, and acknowledged by its
// stream when one captures the subject, before the message is terminated;
// if that publish fails, the message is Nak'd and dead-lettered on a later
// delivery. Term is plain Term: servers before 2.10 leave a message
// terminated with TermWithReason unacknowledged.
//
// While a handler runs longer than a third of the receiver's lease, the
// lease heartbeat also calls InProgress on the message, so JetStream does
// not redeliver it meanwhile. Choose the lease so that a third of it is well
// under the consumer's AckWait (the 30s default lease beats every 10s).
//
// # Dead letters
//
// A dead letter carries the original data and headers, plus Dedup-Reason
// (the dedup.Reason), Dedup-Error, Dedup-Subject, Dedup-Key when there was
// one, and for JetStream Dedup-Stream, Dedup-Consumer, Dedup-Sequence and
// Dedup-Delivery-Count. The original Nats-Msg-Id moves to Dedup-Msg-Id; the
// dead letter's own is "dedup-dlq:<stream>:<sequence>", so a stream with a
// duplicate window stores one dead letter per message.
//
// # Core NATS
//
// Core NATS has no acknowledgements. A duplicate is dropped, and a
// duplicate request is answered with the stored result (Dedup-Status:
// duplicate), encoded like the first reply by a [ReplyEncoder]. A request
// that cannot be done now gets a reply with Dedup-Reason and
// Dedup-Retry-After ([ReplyErrorOf] reads it); a plain message that cannot
// be done now is dead-lettered with [ReasonNoRedelivery], as nothing would
// deliver it again.
//
// # Horizon check
//
// A duplicate that arrives after the receiver's retention is processed
// again. At Start, the Consumer compares the retention with the consumer's
// redelivery horizon ([Horizon]: the BackOff schedule summed over
// MaxDeliver deliveries, or AckWait x MaxDeliver) and logs a warning when
// the retention is shorter or MaxDeliver is unlimited; with
// Options.StrictHorizon, Start fails with [ErrHorizon]. The retention is
// the receiver's ([dedup.Receiver.Retention]).
//
// # Lifecycle
//
// Start starts Options.Concurrency workers pulling through one
// MessagesContext (Prefetch messages ahead). Stop stops pulling, lets the
// workers finish what was fetched, and returns; at ctx's deadline it
// cancels the handlers (their messages are Nak'd) and returns ctx's error.
// Stopped is closed once every worker is gone, also when the connection
// closes (Err says why). Cancelling Start's context is a hard stop.
package nats
