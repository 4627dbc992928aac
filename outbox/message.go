package outbox

// Message is an outgoing message, as a relay hands it to a [Publisher].
type Message struct {
	// ID is the message's id (see [MessageID]). The publisher puts it
	// where the broker's producer id lives (Nats-Msg-Id on JetStream, the
	// AMQP message-id property, a Message-Id header on Kafka), where the
	// next consumer's idstrategy.MessageID or MessageHeader finds it, and
	// every copy of the message carries the same one.
	ID string

	// Destination is where the message goes, in the publisher's terms: a
	// subject on NATS, a topic on Kafka, a routing key (or exchange and
	// key) on RabbitMQ; each publisher's documentation says which.
	Destination string

	// OrderingKey groups messages whose order matters: the relay publishes
	// the messages of one key in the order they were written, and a
	// publisher may use it where its broker keeps order (the Kafka message
	// key, so one key stays in one partition). Empty: no order is kept.
	OrderingKey string

	// Body is the message's data, as written.
	Body []byte

	// Header holds the message's headers, names matched exactly; nil for
	// none. A publisher sets its own id header after these, so a header
	// of that name here is overwritten.
	Header map[string]string
}
