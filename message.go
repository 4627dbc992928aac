package dedup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/dedup-go/dedup/delivery"
)

// Message is the envelope every broker adapter hands the receiver, whatever
// the broker: the decoded body beside the raw data and the broker's
// metadata, so that one Receiver, one Handler and one KeyFunc serve NATS,
// RabbitMQ and Kafka consumers at once, and a key strategy can use either
// side without decoding twice.
//
//	func charge(ctx context.Context, m *dedup.Message[Order]) (Receipt, error)
//
// The conventions are the same on every broker:
//   - DeliveryCount is 1 on a message's first delivery, 2 on its first
//     redelivery, and 0 when the broker does not say (Kafka, RabbitMQ
//     classic queues, core NATS). Adapters convert the broker's own counter
//     (RabbitMQ's x-delivery-count starts at 0, JetStream's NumDelivered at
//     1).
//   - Header names are matched exactly, case included, as the producer
//     wrote them: AMQP tables, Kafka headers and NATS headers are all
//     case-sensitive maps or lists.
//   - Stream, Partition and Offset locate the message in a log when Stream
//     is set: the Kafka topic, partition and offset; the JetStream stream and
//     stream sequence (Partition 0). They are empty for brokers without one.
//
// Adapters fill the exported fields; a test (or an adapter of your own) may
// build a Message by hand. Reach the broker's own message through the
// adapter's typed accessor (dedupnats.NativeJetStream(m), say), never through
// Native directly.
//
// A *Message implements adapter.Heartbeater (it calls OnHeartbeat, the adapter's
// way to tell the broker that a long handler is still working) and
// adapter.Fingerprinter (the SHA-256 of Data, when FingerprintData is set).
type Message[T any] struct {
	// Body is Data decoded by the adapter's Decoder.
	Body T
	// Data is the body as the broker delivered it.
	Data []byte
	// Header holds the message's headers; nil when it has none. Use
	// [Message.HeaderValue], which also works on a nil Header.
	Header delivery.Header
	// ID is the broker's message id, when the producer set one: the
	// Nats-Msg-Id header, the AMQP message-id property. Empty otherwise
	// (Kafka has none: key on a header or the body).
	ID string
	// Source is where the message was consumed from: the NATS subject, the
	// RabbitMQ queue, the Kafka topic.
	Source string
	// Stream is the log the message is stored in: the JetStream stream, the
	// Kafka topic. Empty for brokers without one.
	Stream string
	// Partition is the Kafka partition; 0 elsewhere.
	Partition int
	// Offset is the message's position in Stream (and Partition): the Kafka
	// offset, the JetStream stream sequence. Meaningful only when Stream is
	// set.
	Offset int64
	// DeliveryCount is 1 for a first delivery; 0 when the broker does not
	// count deliveries (Kafka, RabbitMQ classic queues, core NATS).
	DeliveryCount int
	// Redelivered reports whether the broker says it delivered the message
	// before (a delivery count above 1, AMQP's redelivered flag).
	Redelivered bool
	// Timestamp is when the broker stored the message, or the producer's
	// timestamp where the broker keeps only that; zero when unknown.
	Timestamp time.Time
	// Broker names the adapter that filled the message: "jetstream",
	// "nats", "rabbitmq", "kafka", "http", "grpc".
	Broker string

	// Native is the broker's own message. Read it with the adapter's typed
	// accessor; do not acknowledge it: the adapter settles every message
	// after its outcome is recorded.
	Native any
	// OnHeartbeat, when set, is called each time the receiver extends the
	// message's lease (JetStream's InProgress).
	OnHeartbeat func(ctx context.Context) error
	// FingerprintData makes Fingerprint return the SHA-256 of Data, so a
	// message whose id was first used with other data is refused with
	// ErrKeyReused. Adapters set it from their options.
	FingerprintData bool
}

// Origin says where m comes from, for an Observer (delivery.Originer).
func (m *Message[T]) Origin() delivery.Origin {
	o := delivery.Origin{Broker: m.Broker, Source: m.Source, Stream: m.Stream, Partition: m.Partition, Offset: m.Offset,
		DeliveryCount: m.DeliveryCount, MessageID: m.ID, Header: m.Header}
	return o
}

// HeaderValue returns the first value of the named header and whether it is
// present. The name is matched exactly, case included.
func (m *Message[T]) HeaderValue(name string) (string, bool) {
	if m.Header == nil {
		return "", false
	}
	return m.Header.Get(name)
}

// Heartbeat calls OnHeartbeat, if set.
func (m *Message[T]) Heartbeat(ctx context.Context) error {
	if m.OnHeartbeat == nil {
		return nil
	}
	return m.OnHeartbeat(ctx)
}

// Fingerprint returns "sha256:" and the hex SHA-256 of Data when
// FingerprintData is set, and "" (no fingerprint) otherwise.
func (m *Message[T]) Fingerprint() (string, error) {
	if !m.FingerprintData {
		return "", nil
	}
	sum := sha256.Sum256(m.Data)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// fingerprinter and heartbeater are adapter.Fingerprinter and
// adapter.Heartbeater, which the receiver finds on a message type.
type (
	fingerprinter interface{ Fingerprint() (string, error) }
	heartbeater   interface {
		Heartbeat(ctx context.Context) error
	}
)

// Compile-time checks.
var (
	_ heartbeater   = (*Message[struct{}])(nil)
	_ fingerprinter = (*Message[struct{}])(nil)
)
