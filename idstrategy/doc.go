// Package idstrategy turns a message into its id: the dedup.KeyFunc a
// dedup.Receiver deduplicates on. Each strategy is a constructor returning a
// dedup.KeyFunc[M]; they nest, so a receiver's rule reads like a sentence:
//
//	key := idstrategy.FirstOf(
//		idstrategy.MessageHeader[Order]("Idempotency-Key"),
//		idstrategy.DataCanonicalJSON[Order](),
//	)
//
// # On the message envelope
//
// Every broker adapter hands the receiver a *dedup.Message[T], so these
// strategies serve NATS, RabbitMQ and Kafka consumers alike, and the same
// logical message gets the same id whichever broker delivered it, as long as
// that broker fills the field used:
//
//   - [MessageID]: the broker's message id, Message.ID (Nats-Msg-Id, the
//     AMQP message-id; Kafka has none).
//   - [MessageHeader]: a header, matched exactly, case included (every
//     broker).
//   - [BodyField]: a field of the decoded body (every broker).
//   - [DataHash], [DataCanonicalJSON]: [ContentHash] and [CanonicalJSON] of
//     the raw body (every broker).
//   - [StreamSequence]: "stream:sequence" of a JetStream message; it refuses
//     Kafka messages, whose offsets count per partition.
//   - [TopicPartitionOffset]: "topic:partition:offset" of a Kafka message
//     (and of a JetStream one, in partition 0).
//
// StreamSequence and TopicPartitionOffset catch the broker's redeliveries of
// one stored message, not a producer that published twice; prefer an id the
// producer sends. Each is one of the generic strategies below applied to a
// field of the envelope, with the same checks and error messages, and a nil
// message fails with dedup.ErrNoKey. The generic strategies serve message
// types of your own.
//
// # Choosing a strategy
//
// The best id is one the producer assigns once and sends with every copy:
//
//   - [Field]: a field of the message (an event id, an order number).
//   - [Header]: a header, read through a getter for a message type of your
//     own; on the envelope, [MessageHeader] reads dedup.Message's headers on
//     every broker, and [MessageID] its broker message id.
//   - [Method]: messages with an IdempotencyKey() string method.
//
// Without one, the id is derived, and which derivation decides what counts as
// the same message:
//
//   - [ContentHash]: the same bytes are the same message.
//   - [CanonicalJSON]: the same JSON document is the same message, however
//     its fields are ordered, spaced or escaped.
//   - [Composite]: the same business key is the same message, such as tenant,
//     order and event; parts are escaped so that they never run together.
//   - [Windowed]: the same id within a time window, such as once a day.
//
// Around them:
//
//   - [FirstOf]: the first strategy that finds an id (a header, else a content
//     hash).
//   - [ByType], [ByGoType]: a strategy per message type, by a type name or by
//     Go type.
//   - [HashLong]: hash ids over a length limit instead of rejecting them.
//   - [MaxLength]: another length limit than adapter.DefaultMaxIDLength.
//
// # Errors
//
// A missing id never means "do not deduplicate". A message without one fails with an
// error matching dedup.ErrNoKey, a message whose id is unusable (empty,
// longer than adapter.DefaultMaxIDLength bytes, not valid UTF-8) with one
// matching dedup.ErrInvalidKey; errors returned by the user's functions are
// wrapped to match dedup.ErrInvalidKey too. The Receiver treats both as poison
// and adapters dead-letter the message. The message names the strategy and
// what was wrong, through every level of nesting:
//
//	idstrategy: composite part 2 of 2: field "OrderID": dedup: message has no id: the field is empty
//
// Every id returned has passed adapter.ValidateID with
// adapter.DefaultMaxIDLength. Over-long ids are rejected rather than cut or
// hashed unless the receiver opts into [HashLong], because an id that long is
// more often a bug worth seeing. A receiver whose Config.MaxIDLength is
// larger wraps its strategy in [MaxLength] with the same limit; the Receiver
// checks its own limit again either way.
//
// Strategies never panic on a message, whatever it holds, except where a
// function the user passed in panics. Constructors do panic on a
// configuration error (a nil function, a non-positive window, no cases), with
// an error matching dedup.ErrInvalidConfig: strategies are built once at
// start-up, and one that failed every message instead would have every
// message dead-lettered before anyone noticed.
//
// # Concurrency
//
// Strategies hold no mutable state and may be called from many goroutines at
// once, as long as the functions passed to them may.
package idstrategy
