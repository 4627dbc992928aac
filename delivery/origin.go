package delivery

// Origin says where a delivery comes from. Adapters fill it from the
// broker's message (dedup.Message implements [Originer]) and, for what a
// message does not carry (the server, the consumer group, the
// destination's template), from their consumer, with adapter.WithOrigin; a
// message type of one's own can implement Originer too. Zero fields are
// unknown.
type Origin struct {
	// Broker names the adapter: "jetstream", "nats", "rabbitmq", "kafka",
	// "http", "grpc".
	Broker string
	// Source is where the message was consumed from: the subject, the
	// queue, the topic, the HTTP route or the gRPC method.
	Source string
	// Stream is the log the message is stored in (the JetStream stream,
	// the Kafka topic); Partition and Offset its position there.
	Stream    string
	Partition int
	Offset    int64
	// DeliveryCount is the broker's count, 1 for a first delivery.
	DeliveryCount int
	// MessageID is the producer's id, when it set one. Never a metric
	// attribute: it is unbounded.
	MessageID string
	// Header is the message's headers (where a producer's trace context
	// travels); nil when it has none.
	Header Header
	// DestinationTemplate is Source's low-cardinality form, when Source
	// may carry an id ("orders.*" for the subject "orders.42"): metrics
	// name the destination by it, and a tracer names the delivery's span
	// after it. Equal to Source when Source is a name of its own (a
	// literal subject).
	DestinationTemplate string
	// ConsumerGroup names the consumers that share Source's messages: the
	// JetStream consumer, the core NATS queue group, the Kafka consumer
	// group.
	ConsumerGroup string
	// ServerAddress and ServerPort are the broker's the message was
	// consumed from: the host of the URL the connection is connected to
	// (a name when it was given one, else an IP address), and its port.
	ServerAddress string
	ServerPort    int
}

// Originer is implemented by messages that know their Origin.
type Originer interface {
	Origin() Origin
}
