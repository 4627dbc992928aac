// Package dedupnats runs a dedup.Receiver over NATS: JetStream pull consumers
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
//	// A stream of its own must capture the dead-letter subject: Start checks.
//	c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DeadLetterSubject: "dlq.orders"})
//	// Start's context is the consumer's lifetime: its end without Stop is a
//	// hard stop, logged and reported by Err as an error.
//	err = c.Start(context.Background())
//
//	sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//	defer stop()
//	<-sig.Done()
//	// Stop with a context of its own, which bounds the drain.
//	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
//	defer cancel()
//	err = c.Stop(stopCtx) // drains: finishes what was fetched, cancels the handlers at the deadline
//
// Coming from the first versions: the handler takes a *dedup.Message[T]
// instead of a *dedupnats.Msg[T], the key strategies moved to idstrategy
// (dedupnats.BodyField → idstrategy.BodyField, MsgID → MessageID, Header →
// MessageHeader, ContentHash → DataHash), the decoders to the root
// (dedupnats.JSON → dedup.JSONDecoder, Raw → dedup.RawDecoder),
// dedup.Decide became rcv.Decide, and Options.OnDecision became the
// receiver's dedup.Config.Observer.
//
// Coming from 0.1: the dead-letter headers of every broker are named by
// package delivery (Dedup-Subject → delivery.HeaderSource "Dedup-Source",
// Dedup-Consumer → HeaderConsumerGroup "Dedup-Consumer-Group",
// Dedup-Sequence → HeaderOffset "Dedup-Offset", Dedup-Msg-Id →
// HeaderOriginalMessageID "Dedup-Original-Message-Id"; read a letter's
// with delivery.LookupHeader, which finds either name), CoreMsg became
// [Native] and JetStreamMsg [NativeJetStream], Subscriber.Dropped and
// DeadLettersTruncated became fields of Stats, and WithReplyEncoder
// Options.ReplyEncoder.
//
// # The envelope
//
// The adapter decodes each body (with dedup.JSONDecoder unless
// Options.Decoder says otherwise) and hands the receiver the envelope every
// adapter of dedup fills, a *dedup.Message[T], so that one receiver and one
// handler can serve NATS and other brokers at once:
//
//	Body, Data      the decoded body and the data as published
//	Header          the NATS headers (delivery.MapHeader: names match exactly, case included); nil without any
//	ID              the Nats-Msg-Id header
//	Source          the subject
//	Stream, Offset  the stream and stream sequence (JetStream)
//	DeliveryCount   NumDelivered: 1 on the first delivery (JetStream); 0 on core NATS, which does not count
//	Redelivered     NumDelivered > 1
//	Timestamp       when the stream stored the message (JetStream)
//	Broker          "jetstream" or "nats" (BrokerJetStream, BrokerNATS)
//
// [NativeJetStream] and [Native] return the broker's own message behind an
// envelope (the reply subject of a core request is Native's Reply). Do
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
// deliver it again, except when the key is in flight elsewhere: the last
// delivery then waits for the holder's outcome (asking the receiver again
// as the holder's lease runs, with InProgress meanwhile). A holder that
// completes makes it a duplicate (Ack); one that fails, dies or loses its
// lease leaves the key to it, and it runs the handler itself, dead-lettered
// as max-deliver only if that fails too. The dead letter is published, and
// acknowledged by its stream, before the message is terminated; if that
// publish fails, the message is Nak'd and dead-lettered on a later
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
// A dead letter carries the original data and headers, plus the headers of
// package delivery every adapter sets: Dedup-Reason (the delivery.Reason),
// Dedup-Error, Dedup-Source (the subject), Dedup-Key when there was one,
// and for JetStream Dedup-Stream, Dedup-Consumer-Group (the consumer),
// Dedup-Offset (the stream sequence) and Dedup-Delivery-Count. The
// original Nats-Msg-Id moves to Dedup-Original-Message-Id and its other
// Nats-* headers (Nats-Expected-*, Nats-Rollup, Nats-TTL...) to
// Dedup-Original-Nats-* ([HeaderOriginalPrefix]), since the server would
// act on them when the dead letter is published. Read them with
// delivery.LookupHeader: a letter published by 0.1 names them
// Dedup-Subject, Dedup-Consumer, Dedup-Sequence and Dedup-Msg-Id.
//
// The dead letter's own Nats-Msg-Id names the stream, its creation time,
// the consumer and the sequence, so a stream with a duplicate window
// stores one dead letter per message and consumer, also across a deleted
// and recreated stream of the same name. A dead letter that would exceed
// the server's max payload or the dead-letter stream's MaxMsgSize is a cut
// copy saying so ([HeaderTruncated], Dedup-Original-Size), counted in
// Stats().DeadLettersTruncated, rather than a publish refused on every
// delivery.
//
// What would lose poison silently is refused: NewConsumer and
// NewSubscriber refuse options without DeadLetterSubject, nil options
// included ([ErrNoDeadLetter], naming the field; Options.DropPoison allows
// it, each dropped message logged at error level and counted in
// Stats().PoisonDropped), and Start refuses a subject no stream captures
// ([ErrDeadLetterStream]; Options.CoreDeadLetters allows core NATS dead
// letters, with a warning) and a subject the consumer's own stream captures
// (it would read its dead letters back).
//
// # Core NATS
//
// Core NATS has no acknowledgements, and no redelivery: a message the
// client drops because the subscription's pending limits are exceeded (a
// slow consumer) is gone. The Subscriber logs each drop at error level and
// counts it in Stats().SlowConsumerDropped (not as a delivery: they never
// reached the subscriber); Options.PendingMsgsLimit and
// PendingBytesLimit set the limits. A duplicate is dropped, and a
// duplicate request is answered with the stored result (Dedup-Status:
// duplicate), encoded like the first reply by Options.ReplyEncoder. A request
// that cannot be done now gets a reply with Dedup-Reason and
// Dedup-Retry-After ([ReplyErrorOf] reads it); a plain message that cannot
// be done now is dead-lettered with [ReasonNoRedelivery], as nothing would
// deliver it again.
//
// # Start checks
//
// Start refuses a consumer that does not use explicit acks
// ([ErrAckPolicy]): with AckNone or AckAll a retry is lost.
//
// A duplicate that arrives after the receiver's retention is processed
// again. At Start, the Consumer compares the retention with the consumer's
// redelivery horizon ([Horizon]: the BackOff schedule summed over
// MaxDeliver deliveries, or AckWait x MaxDeliver, each delivery counted at
// least as long as the longest NakWithDelay the adapter may send: the
// receiver's lease, StoreRetryDelay and backoff), and a third of the
// receiver's lease (the first InProgress) with the shortest AckWait or
// BackOff entry. A retention shorter than the horizon, an unlimited
// MaxDeliver, or a heartbeat that comes too late logs a warning; with
// Options.StrictHorizon, Start fails with [ErrHorizon].
//
// # Observing
//
// The adapter has no callback of its own. Each handing of a message to the
// receiver is one delivery (dedup.Receiver.Deliver; Refused for a body
// that does not decode), and the receiver's dedup.Config.Observer hears of
// it once, when the adapter settled it, as one delivery.Event: Broker
// "jetstream" or "nats" ([BrokerJetStream], [BrokerNATS]), Source the
// subject, MessageID the Nats-Msg-Id, and on JetStream Stream, Offset (the
// stream sequence) and DeliveryCount (NumDelivered); ServerAddress and
// ServerPort the host and port of the URL the connection is connected to
// (the server the message came from), ConsumerGroup the JetStream
// consumer's name (an ephemeral consumer's is made anew with it) or the
// Subscriber's queue group, DestinationTemplate the subject's template
// (Options.DestinationTemplate, else the consumer's filter subject or the
// stream's subject the subject matches, or the Subscriber's subject); the
// receiver's answer;
// and what was done, SettleDuration and SettleErr being those of the
// broker call that did it:
//
//	JetStream
//	  Ack                  Decision Ack; the Ack (DoubleAck with AckSync)
//	  Retry                Decision Retry; the NakWithDelay
//	  Dead letter          Decision DeadLetter; the dead letter's publish and the Term. A
//	                       failed publish (SettleErr matches [ErrDeadLetter]) is Nak'd for a
//	                       later delivery, itself reported
//	  Last delivery        a retry on it becomes a dead letter, Decision.Reason
//	                       [ReasonMaxDeliver]; one in flight elsewhere is held: each wait
//	                       for the holder settles the try before it as Decision Retry
//	                       (SettleDuration the wait, InProgress meanwhile), and the message
//	                       is handed to the receiver again, a delivery of its own
//	  Dropped (DropPoison) Decision Ack with the poison's reason (undecodable, ...); the Term
//	Core NATS
//	  Ack                  Decision Ack; nothing to do, or the reply with the result (a result
//	                       that does not encode is a SettleErr)
//	  Retry                a request only: Decision Retry; the reply with Dedup-Retry-After.
//	                       A plain message becomes a dead letter, [ReasonNoRedelivery], or an
//	                       Ack with reason in-flight when another delivery holds its key
//	  Dead letter          Decision DeadLetter; the dead letter's publish, and a request's reply
//	  Dropped (DropPoison) Decision Ack with the poison's reason; a request's reply
//
// A message that is not a JetStream delivery (no metadata) is logged and
// ignored, and core NATS messages still buffered at a hard stop are lost
// without being handled: neither is reported.
//
// The handler, the Observer and the adapter's logs about a delivery get
// the delivery's context (with the span a delivery.DeliveryStarter Observer,
// such as dedupotel's, started), and every log line is written with
// slog's Context methods. Dead letters and replies carry the delivery's
// trace context in their headers, written by the Observer when it is a
// delivery.Injector (a header of the same name the original had, the
// producer's traceparent say, takes the new value; a dead letter cut to
// fit keeps it): whoever reads them continues this delivery's trace.
//
// Stats returns what a Consumer or Subscriber did, in the
// dedup.ConsumerStats shape every adapter shares (see [Consumer.Stats]
// and [Subscriber.Stats]): Delivered, Acked, RetriedInPlace (NakWithDelay
// and the holds of a last delivery on JetStream; requests asked to retry
// on core NATS), DeadLettered, PoisonDropped and SettleFailures; a
// settlement that failed counts only as a SettleFailure. Two fields are
// not of deliveries: DeadLettersTruncated (dead letters cut to fit) and,
// on a Subscriber, SlowConsumerDropped (core NATS messages the client
// dropped, a slow consumer). RetriedLater, Reconnects and StaleDeliveries
// stay 0. The receiver's Stats counts the dead letters published by reason.
// Warnings go to Options.Logger, by default the receiver's logger.
//
// # Options
//
// A nil *Options means all defaults. DeadLetterSubject has none: without
// it (or DropPoison), NewConsumer and NewSubscriber refuse with an error
// matching [ErrNoDeadLetter] and dedup.ErrInvalidConfig that names the
// field. No constructor panics on bad input.
//
// # Ownership
//
// What the caller passes in stays the caller's: the adapter never closes
// the connection, nor deletes the JetStream consumer, it was given, not
// even on Stop or a hard stop. It closes only what it made itself: the
// subscription of a Subscriber and the message iterator of a Consumer.
// Close the connection after Stop returns.
//
// # Lifecycle
//
// Start starts Options.Concurrency workers pulling through one
// MessagesContext (Prefetch messages ahead). Stop stops pulling, lets the
// workers finish what was fetched, and returns; at ctx's deadline it
// cancels the handlers (their messages are Nak'd) and returns ctx's error.
// Stopped is closed once every worker is gone.
//
// A stop nobody asked for is logged at error level, and Err returns it,
// matching [ErrStoppedUnasked] and its cause: the consumer or its stream
// deleted (jetstream.ErrConsumerDeleted), the connection closed
// (nats.ErrConnectionClosed), or Start's context ending before Stop was
// called (context.Cause of that context, context.DeadlineExceeded for a
// context.WithTimeout). The latter is a hard stop: fetching stops, the
// handlers' contexts are cancelled, nothing is drained. So give Start a
// context that lives as long as the consumer should (not a signal context,
// nor one with a timeout meant for something else), and shut down with
// Stop, on a context of its own that bounds the drain, as in the example
// at the top.
package dedupnats
