// Package nats runs a dedup.Receiver over NATS: JetStream pull consumers
// ([Consumer]) and core NATS subscriptions, plain or in a queue group
// ([Subscriber]). Import it next to the NATS client under an alias:
//
//	import (
//		"github.com/nats-io/nats.go/jetstream"
//
//		"github.com/dedup-go/dedup"
//		dedupnats "github.com/dedup-go/dedup/adapters/nats"
//		"github.com/dedup-go/dedup/idstrategy"
//	)
//
//	charge := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) { ... }
//	rcv, err := dedup.NewReceiver(store, idstrategy.BodyField("id", func(o Order) string { return o.ID }), charge,
//		&dedup.Config{Namespace: "billing"})
//	c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DeadLetterSubject: "dlq.orders"})
//	err = c.Start(ctx)
//	defer c.Stop(ctx)
//
// Coming from the first versions: the handler takes a *dedup.Message[T]
// instead of a *dedupnats.Msg[T], the key strategies moved to idstrategy
// (dedupnats.BodyField → idstrategy.BodyField, MsgID → MessageID, Header →
// MessageHeader, ContentHash → DataHash), the decoders to the root
// (dedupnats.JSON → dedup.JSONDecoder, Raw → dedup.RawDecoder),
// dedup.Decide became rcv.Decide, and Options.OnDecision became the
// receiver's dedup.Config.Observer.
//
// # The envelope
//
// The adapter decodes each body (with dedup.JSONDecoder unless
// Options.Decoder says otherwise) and hands the receiver the envelope every
// adapter of dedup fills, a *dedup.Message[T], so that one receiver and one
// handler can serve NATS and other brokers at once:
//
//	Body, Data      the decoded body and the data as published
//	Header          the NATS headers (dedup.MapHeader: names match exactly, case included); nil without any
//	ID              the Nats-Msg-Id header
//	Source          the subject
//	Stream, Offset  the stream and stream sequence (JetStream)
//	DeliveryCount   NumDelivered: 1 on the first delivery (JetStream); 0 on core NATS, which does not count
//	Redelivered     NumDelivered > 1
//	Timestamp       when the stream stored the message (JetStream)
//	Broker          "jetstream" or "nats" (BrokerJetStream, BrokerNATS)
//
// [JetStreamMsg] and [CoreMsg] return the broker's own message behind an
// envelope (the reply subject of a core request is CoreMsg's Reply). Do
// not acknowledge or answer it: the adapter does, once the outcome is
// recorded. A body that does not decode never reaches the receiver: it is
// poison, dead-lettered with reason "undecodable".
//
// # Ids
//
// Any dedup.KeyFunc[*dedup.Message[T]] works; package idstrategy has the
// strategies for the envelope, the same on every broker: MessageID (the
// Nats-Msg-Id header), MessageHeader, StreamSequence (stream and
// sequence), DataHash (SHA-256 of the data) and BodyField (a field of the
// decoded body), and combinators over them. Key on the id the producer
// puts in every copy: a copy republished without Nats-Msg-Id slips past
// JetStream's duplicate window, but not past its order id.
//
// # Decisions on JetStream
//
// Every outcome goes through the receiver's Decide:
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
// # Observing
//
// The adapter has no callback of its own: after settling each delivery it
// reports a dedup.EventSettled event (broker, subject, key, status,
// attempt, decision, error, problem) to the receiver's
// dedup.Config.Observer, beside the receiver's own dedup.EventHandled. Its
// warnings go to Options.Logger, by default the receiver's logger.
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
