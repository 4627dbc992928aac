// Package adapter is what a broker adapter, a middleware or a message
// type of one's own needs from dedup, beyond the application developer's
// surface of package dedup: the receiver's view that hands out deliveries
// to settle ([Bind], [Receiver], [Delivery]), decoding ([DecodeBody]), the
// optional abilities of a message type ([Heartbeater], [Fingerprinter],
// delivery.Originer), what a consumer adds to its deliveries' Origin
// ([WithOrigin]), and the names of retry tiers ([RetryName]).
//
// Application code does not import it: it makes a dedup.Receiver and hands
// it to an adapter (dedupnats, dedupamqp, dedupkafka, the HTTP and gRPC
// middleware), which binds it.
//
// # The rules an adapter meets
//
// Every adapter of this repository follows them, so that a user's
// Receiver, Observer, dashboards and tools (dedupctl) work the same on
// every broker. The conformance suite, package adapter/adaptertest,
// checks them on a real broker; run it in the adapter's tests.
//
//  1. Bind once. The constructor takes the user's *dedup.Receiver, calls
//     [Bind] and keeps the *Receiver; a nil receiver is refused with an
//     error matching dedup.ErrInvalidConfig.
//
//  2. Decode with [DecodeBody] (the Decoder of the adapter's options,
//     dedup.JSONDecoder by default). A body that does not decode never
//     reaches the handler: hand the message to [Receiver.Refused] with
//     DecodeBody's error, whose Decision dead-letters it with reason
//     delivery.ReasonUndecodable. Every other message goes to
//     [Receiver.Deliver] (or DeliverBatch), filled with every field of
//     dedup.Message the broker knows (Source, Stream, Partition, Offset,
//     DeliveryCount from 1, ID, Header, Timestamp, Broker).
//
//  3. Carry out the Decision, then settle, exactly once per delivery. Ack
//     acknowledges (commits); Retry hands the message back for a later
//     delivery after Decision.Delay (a nak, a requeue, a copy in a retry
//     tier); DeadLetter publishes a dead letter, waits for the broker to
//     confirm it, and only then removes the original. Then call
//     [Delivery.Settled] once, with what was done, how long it took, and
//     what failed (Settlement.Err): the Observer hears one delivery.Event
//     per delivery, and the receiver counts the dead letters. A delivery
//     the adapter could not hand to the receiver (one that arrived after
//     Stop) is reported with [Receiver.Observe] instead.
//
//  4. Ack only after the outcome is recorded: never on receipt, never
//     before Deliver returned. Whatever is not settled when the consumer
//     stops (a hard stop, a crash) must go back to the broker and be
//     delivered again; the record makes that redelivery a duplicate.
//
//  5. Dead letters carry the original data and headers, and the
//     delivery.Header* vocabulary: HeaderReason (the Decision's Reason),
//     HeaderError, HeaderKey, HeaderSource, and what the broker knows of
//     HeaderStream, HeaderPartition, HeaderOffset, HeaderConsumerGroup,
//     HeaderDeliveryCount, HeaderOriginalMessageID and HeaderDeadLetteredAt.
//     A concept only one broker has gets a header of that adapter's own,
//     with the same "Dedup-" prefix. Whatever reads these headers back
//     (retry copies, dead letters to redrive) reads them with
//     delivery.LookupHeader, which also knows the names of 0.1. Without a
//     dead-letter target, poison is dropped only when the user asked for
//     it (Options.DropPoison), logged, and counted in PoisonDropped.
//
//  6. Retry tiers (the queues or topics that hold retry copies for a
//     delay) are named by [RetryName]: "orders.retry.5s".
//
//  7. Every consumer satisfies dedup.Consumer, checked at compile time
//     (var _ dedup.Consumer = (*Consumer[struct{}, struct{}])(nil)): Start
//     starts once (a second Start fails); Stop stops taking deliveries and
//     drains (each delivery handed to the receiver completes and is settled
//     before Stop returns), and at the end of its context cancels the
//     handlers and returns that context's error; Stopped closes once the
//     consumer stopped, by Stop or on its own; Err says why it stopped on
//     its own, nil after Stop; no goroutine outlives Stop.
//
//  8. Counters are fields of dedup.ConsumerStats, returned by Stats
//     (Delivered, Acked, RetriedInPlace, RetriedLater, DeadLettered,
//     PoisonDropped, SettleFailures, ...), documented per adapter; a
//     consumer has no counter methods of its own.
//
//  9. Origin: the message's fields say where a delivery came from
//     (dedup.Message implements delivery.Originer); what only the consumer
//     knows (the server, the consumer group, the destination's template)
//     is added once, with [WithOrigin] on the context deliveries are
//     handed over with.
//
//  10. Trace context: every message an adapter publishes on a delivery's
//     behalf (a dead letter, a retry copy, a reply) carries the delivery's
//     trace context, written by [Receiver.Inject] with the delivery's
//     [Delivery.Context].
//
//  11. Configuration is an Options struct per adapter: a nil *Options
//     means every default, a zero field its default, and no builder
//     methods. A bad option or argument is an error matching
//     dedup.ErrInvalidConfig, returned by the constructor (or by Start,
//     for what only the broker can tell).
//
//  12. Never panic on bad input: a nil argument, a malformed message, a
//     header of the wrong type, a decoder that panics (DecodeBody recovers
//     it) are errors or poison, not crashes.
//
// # Middleware and message types
//
// A middleware (HTTP, gRPC) follows rules 1 to 3 and 9 to 12 with its
// transport's answer in place of an ack: a status and a body. A message
// type of one's own (not dedup.Message) may implement [Heartbeater] (to
// hear each lease extension), [Fingerprinter] (to have a reused id
// refused) and delivery.Originer (to say where it comes from).
package adapter
