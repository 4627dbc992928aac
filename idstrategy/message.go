package idstrategy

import (
	"fmt"
	"strconv"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
)

// The strategies of this file key a *dedup.Message[T], the envelope every
// broker adapter fills, so that one strategy serves NATS, RabbitMQ and Kafka
// consumers alike: the same logical message gets the same id whichever broker
// delivered it, as long as the field used is one that broker fills. Each is a
// generic strategy of this package on one field of the envelope, with the
// same validation and error messages, and each fails with dedup.ErrNoKey on a
// nil message instead of panicking.

// onMessage runs key on messages that are not nil, and fails with
// dedup.ErrNoKey under strategy's name on a nil one.
func onMessage[T any](strategy string, key dedup.KeyFunc[*dedup.Message[T]]) dedup.KeyFunc[*dedup.Message[T]] {
	return func(m *dedup.Message[T]) (string, error) {
		if m == nil {
			return "", noKey(strategy, "the message is nil")
		}
		return key(m)
	}
}

// MessageID uses the broker's message id, Message.ID, as the id: the
// producer's own id for the message, sent with every copy it publishes.
//
// Filled by JetStream and core NATS (the Nats-Msg-Id header, on which
// JetStream also deduplicates within its duplicate window) and RabbitMQ (the
// AMQP message-id property). Kafka has no message id: a Kafka message fails
// with dedup.ErrNoKey, as does any message whose producer set none; key
// those on a header ([MessageHeader]) or the body ([BodyField]).
func MessageID[T any]() dedup.KeyFunc[*dedup.Message[T]] {
	const strategy = "message id"
	return onMessage(strategy, func(m *dedup.Message[T]) (string, error) {
		if m.ID == "" {
			return "", noKey(strategy, "the message has no broker message id")
		}
		if err := check(strategy, m.ID, adapter.DefaultMaxIDLength); err != nil {
			return "", err
		}
		return m.ID, nil
	})
}

// MessageHeader uses the first value of the named header as the id, read
// with Message.HeaderValue. The name is matched exactly, case included, as
// on delivery.Header: "idempotency-key" does not find "Idempotency-Key". A
// header that is missing and one that is present but empty both fail with
// dedup.ErrNoKey, as in [Header].
//
// Filled by every broker that has headers: NATS (core and JetStream, where
// MessageHeader("Nats-Msg-Id") reads the header behind Message.ID), RabbitMQ
// (the AMQP headers table, non-string values as their text) and Kafka (record
// headers). A header the producer sets on every broker gives the same id
// whichever delivered the message.
func MessageHeader[T any](name string) dedup.KeyFunc[*dedup.Message[T]] {
	return onMessage("header "+quote(name), Header(name, (*dedup.Message[T]).HeaderValue))
}

// BodyField uses a field of the decoded body, Message.Body, as the id: an
// event id or an order number the producer put in the payload. name is only
// used in error messages. An empty field fails with dedup.ErrNoKey, as in
// [Field].
//
// Filled by every broker: adapters decode the body before keying, so the
// same payload gives the same id whichever broker delivered it.
//
// It panics if get is nil.
func BodyField[T any](name string, get func(T) string) dedup.KeyFunc[*dedup.Message[T]] {
	if get == nil {
		misconfigured("BodyField", "get is nil (field %q)", name)
	}
	return onMessage("field "+quote(name), Field(name, func(m *dedup.Message[T]) string { return get(m.Body) }))
}

// DataHash uses "sha256:" and the hex SHA-256 of the raw body,
// Message.Data, as the id, exactly as [ContentHash] does: the same bytes
// published twice are one message. An empty body fails with dedup.ErrNoKey.
//
// Filled by every broker, with the bytes as the producer sent them.
func DataHash[T any]() dedup.KeyFunc[*dedup.Message[T]] {
	return onMessage("content hash", ContentHash(messageData[T]))
}

// DataCanonicalJSON uses the hash of the canonical JSON form of the raw body,
// Message.Data, as the id, exactly as [CanonicalJSON] does: the same JSON
// document is one message however its producer serialised it.
//
// Filled by every broker.
func DataCanonicalJSON[T any]() dedup.KeyFunc[*dedup.Message[T]] {
	return onMessage("canonical JSON", CanonicalJSON(messageData[T]))
}

func messageData[T any](m *dedup.Message[T]) ([]byte, error) { return m.Data, nil }

// StreamSequence uses the stream and the message's position in it,
// "<stream>:<offset>" ("ORDERS:42"), as the id, for logs numbered by one
// sequence: the JetStream stream and stream sequence. It catches the broker's
// own redeliveries of one stored message, not a producer that published the
// same message twice (that is two sequences).
//
// Filled by JetStream. A message not stored in a stream (core NATS,
// RabbitMQ) fails with dedup.ErrNoKey, and so does a JetStream message
// without a stream sequence (they start at 1). A message in a partitioned log
// (Kafka, or any message with a Partition) fails with dedup.ErrInvalidKey:
// offsets count per partition, so a topic and offset name one message per
// partition, and keying on them would make messages of different partitions
// duplicates of each other. Use [TopicPartitionOffset] there.
func StreamSequence[T any]() dedup.KeyFunc[*dedup.Message[T]] {
	const strategy = "stream sequence"
	return onMessage(strategy, func(m *dedup.Message[T]) (string, error) {
		switch {
		case m.Broker == "kafka":
			return "", invalidKey(strategy, "Kafka offsets count per partition, so a topic and offset do not "+
				"identify a message; use idstrategy.TopicPartitionOffset")
		case m.Partition != 0:
			return "", invalidKey(strategy, fmt.Sprintf("the message is in partition %d and offsets count per "+
				"partition, so a stream and offset do not identify a message; use idstrategy.TopicPartitionOffset", m.Partition))
		case m.Stream == "":
			return "", noKey(strategy, "the message is not stored in a stream")
		}
		if err := checkOffset(strategy, m); err != nil {
			return "", err
		}
		id := m.Stream + ":" + strconv.FormatInt(m.Offset, 10)
		if err := check(strategy, id, adapter.DefaultMaxIDLength); err != nil {
			return "", err
		}
		return id, nil
	})
}

// TopicPartitionOffset uses the message's position in a partitioned log,
// "<topic>:<partition>:<offset>" ("orders:3:1042"), as the id: the Kafka
// topic, partition and offset. Like [StreamSequence] it catches the broker's
// redeliveries of one stored message (a consumer group rebalanced before the
// offset was committed), not a producer that published twice.
//
// Filled by Kafka, and by JetStream (the stream and stream sequence, in
// partition 0). A message not stored in a log (core NATS, RabbitMQ) fails
// with dedup.ErrNoKey, and so does a JetStream message without a stream
// sequence.
//
// The numbers come last and hold no ':', so ids of different positions never
// meet, whatever the topic name.
func TopicPartitionOffset[T any]() dedup.KeyFunc[*dedup.Message[T]] {
	const strategy = "topic partition offset"
	return onMessage(strategy, func(m *dedup.Message[T]) (string, error) {
		switch {
		case m.Stream == "":
			return "", noKey(strategy, "the message is not stored in a log (it has no topic or stream)")
		case m.Partition < 0:
			return "", invalidKey(strategy, fmt.Sprintf("the partition %d is negative", m.Partition))
		}
		if err := checkOffset(strategy, m); err != nil {
			return "", err
		}
		id := m.Stream + ":" + strconv.Itoa(m.Partition) + ":" + strconv.FormatInt(m.Offset, 10)
		if err := check(strategy, id, adapter.DefaultMaxIDLength); err != nil {
			return "", err
		}
		return id, nil
	})
}

// checkOffset refuses an offset that cannot be a message's position. A
// JetStream message at 0 has none: stream sequences start at 1, so 0 is an
// adapter that did not know it, and keying on it would make every such
// message of the stream one.
func checkOffset[T any](strategy string, m *dedup.Message[T]) error {
	switch {
	case m.Offset < 0:
		return invalidKey(strategy, fmt.Sprintf("the offset %d is negative", m.Offset))
	case m.Offset == 0 && m.Broker == "jetstream":
		return noKey(strategy, "the message has no stream sequence (JetStream's start at 1)")
	}
	return nil
}
