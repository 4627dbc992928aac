package dedup

import (
	"context"
	"time"
)

// Observer hears of every delivery once: when an adapter settled it (see
// [Receiver.Deliver] and [Delivery.Settled]), or, for a caller of Handle
// and HandleBatch, when the receiver answered it. Metrics, tracing and
// logs plug in here (the dedupotel module is one). Observe is called
// synchronously on the delivery's goroutine, with the delivery's context,
// so it must be fast and safe for concurrent use; a panic in it is
// recovered and logged.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// Quiet is an optional ability of an Observer: one that says, when the
// receiver is made, that it records nothing (an OpenTelemetry observer
// over no-op providers) is not called at all, and costs a delivery
// nothing. Its Injector ability, if any, is still used.
type Quiet interface {
	Quiet() bool
}

// DeliveryStarter is an optional ability of an Observer: StartDelivery is
// called before a delivery is handled, and the context it returns is the
// one the key function, the handler and Observe get. A tracing observer
// starts a span in it (so the handler's own spans nest under it) and ends
// it in Observe.
type DeliveryStarter interface {
	StartDelivery(ctx context.Context, o Origin) context.Context
}

// Origin says where a delivery comes from. Adapters fill it from the
// broker's message ([Message] implements [Originer]) and, for what a
// message does not carry (the server, the consumer group, the
// destination's template), from their consumer, with [WithOrigin]; a
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

// originFill is the context key of WithOrigin's fill.
type originFill struct{}

// WithOrigin returns a copy of ctx under which the receiver completes the
// Origin of each delivery with fill, which gets the message's own (see
// [Originer]) and returns it completed: an adapter sets it once on the
// context its deliveries are handed over with, for what it knows of its
// consumer and no message carries (the server it is connected to, its
// consumer group, the destination's template). fill runs for every
// delivery of a receiver with an Observer, and for the events given to
// [Receiver.Observe], on the delivery's goroutine: keep it fast, and safe
// for concurrent use. (An Origin goes by value, which a pointer handed to
// a function unknown to the compiler would move to the heap on every
// delivery.) Under a context that already has one, both run, the outer
// first.
func WithOrigin(ctx context.Context, fill func(Origin) Origin) context.Context {
	if fill == nil {
		return ctx
	}
	if outer, ok := ctx.Value(originFill{}).(func(Origin) Origin); ok {
		inner := fill
		fill = func(o Origin) Origin { return inner(outer(o)) }
	}
	return context.WithValue(ctx, originFill{}, fill)
}

// fillOrigin returns o completed by the fill of WithOrigin in ctx, if any.
func fillOrigin(ctx context.Context, o Origin) Origin {
	if fill, ok := ctx.Value(originFill{}).(func(Origin) Origin); ok {
		return fill(o)
	}
	return o
}

// Originer is implemented by messages that know their Origin.
type Originer interface {
	Origin() Origin
}

// Event is one delivery of one message, from the start of its handling to
// what the adapter did with it: everything a dashboard needs, the same on
// every broker and middleware.
type Event struct {
	// Origin is where the delivery came from.
	Origin
	// Namespace is the receiver's namespace; Key the record's key (empty
	// when the message had no usable id). The key is never a metric
	// attribute: it is unbounded.
	Namespace string
	Key       string
	// Store names the receiver's store by its package: "memstore",
	// "redisstore", "tieredstore", "pgstore", ...
	Store string
	// Status is what the receiver did; Attempt the claim's attempt.
	Status  Status
	Attempt int
	// Decision is what was done with the delivery: what the adapter carried
	// out when Settled, else what Decide answers.
	Decision Decision
	// Err is the error Handle returned; Problem is Result.Problem, what
	// went wrong beside a done status.
	Err     error
	Problem error
	// Stored reports whether the store holds this delivery's outcome: a
	// completed record (this delivery's, or the one a duplicate was
	// answered from). False for a bypassed run, a result not stored, a
	// failure.
	Stored bool
	// Duration is the time the receiver took; HandlerDuration the part of
	// it the handler ran, StoreDuration the part spent waiting on the
	// store: ClaimDuration claiming the key, CompleteDuration recording
	// the outcome (with its retries). For a message of a batch, Duration is
	// the whole batch's, shared by its messages, and the other two are
	// zero: the batch's store round trips serve every message at once.
	Duration, HandlerDuration, StoreDuration time.Duration
	ClaimDuration, CompleteDuration          time.Duration
	// Settled reports whether an adapter carried out the Decision (acked,
	// retried, dead-lettered), taking SettleDuration; SettleErr is what
	// kept it from doing so (the ack failed, the dead letter was not
	// confirmed), nil when it did.
	Settled        bool
	SettleDuration time.Duration
	SettleErr      error
}
