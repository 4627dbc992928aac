// Package dedupotel traces and measures dedup deliveries with
// OpenTelemetry. New returns an Observer; set it as dedup.Config.Observer
// and every adapter (NATS, RabbitMQ, Kafka) and middleware (HTTP, gRPC)
// reports through it:
//
//	obs, err := dedupotel.New(nil)
//	...
//	rcv, err := dedup.NewReceiver(st, key, charge, &dedup.Config{Observer: obs})
//
// A nil *Options means the global TracerProvider, MeterProvider and
// propagator. The module depends on the OpenTelemetry API only; the
// application installs the SDK and its exporters.
//
// # Traces
//
// Each delivery from a broker is one span of kind CONSUMER named
// "process <destination>" ("process orders"; the destination's template
// when it has one, "process orders.*"), per the messaging semantic
// conventions (the attribute keys are those of the semconv/v1.43.0
// package of go.opentelemetry.io/otel v1.47): messaging.system (the
// adapter's name: "kafka", "rabbitmq", "jetstream", "nats"),
// messaging.operation.type "process", messaging.operation.name,
// messaging.destination.name, messaging.destination.template,
// messaging.consumer.group.name, server.address and server.port (the
// broker's, as the adapter reports them in delivery.Origin),
// messaging.destination.partition.id and messaging.kafka.offset (Kafka),
// messaging.message.id, and, when it ends, dedup.status, dedup.decision,
// dedup.reason, dedup.attempt, dedup.namespace, dedup.key, dedup.stored,
// dedup.store.duration and dedup.handler.duration (seconds) and
// dedup.problem. The tree:
//
//	poll (the adapter's, or whatever span the ctx given to Deliver holds)
//	└── process orders          CONSUMER; link → the producer's span
//	    ├── (the handler's spans: its ctx carries the delivery's span)
//	    └── event "settle"      what the adapter did, how long it took
//
// The span's parent is the span in the context given to Deliver. The
// producer's trace context, read from the message's headers with the
// propagator (W3C traceparent by default), becomes a link, not the
// parent: a message may be processed long after it was produced, by a
// consumer that polls many producers' messages in one batch, and the
// messaging conventions recommend links for consumer spans so that a
// producer's trace does not grow by every later redelivery. A backend
// follows the link from the consumer's trace to the producer's.
//
// The settle step (the ack, retry or dead letter the adapter carried out)
// is an event "settle" on the delivery's span, not a child span: it is
// known only when the adapter reports it done (Delivery.Settled, with its
// duration), it is short, and an event costs a fraction of a span in
// every exporter. The event is stamped at the settle's start and carries
// messaging.operation.type "settle", dedup.decision, dedup.reason,
// dedup.settle.duration and dedup.settle.error.
//
// The span's status is Error when the delivery failed (Event.Err: a
// handler error, a store outage, poison), with error.type set to the
// decision's reason; a duplicate or a copy in flight elsewhere is no
// error. A settle that failed (the ack or the dead letter was not done,
// so the broker delivers again) is an Error too.
//
// HTTP and gRPC deliveries (Origin.Broker "http", "grpc") start no span:
// otelhttp's or otelgrpc's server span in the request's context is the
// delivery's, and Observe annotates it with dedup.status, dedup.reason,
// dedup.attempt, dedup.replayed, dedup.in_flight, dedup.key_reused,
// dedup.namespace and dedup.key, leaving its status to the middleware.
//
// Inject writes the trace context of a context with the propagator:
// adapters call it through dedup.Receiver.Inject on every dead letter and
// retry copy they publish, so the trace goes on.
//
// # Metrics
//
// With the names below (a Prometheus exporter adds _total to counters and
// _seconds to durations), never with a key or a message id as an
// attribute:
//
//	messaging.process.duration          histogram, s      the receiver's time (claim, handler, completion)
//	messaging.client.consumed.messages  counter           deliveries from brokers (not HTTP, gRPC)
//	dedup.deliveries                    counter           by dedup.status, dedup.decision, dedup.reason
//	dedup.store.duration                histogram, s      the time waiting on the store, by dedup.store and dedup.store.operation (claim, complete)
//	dedup.handler.duration              histogram, s      for the deliveries that ran the handler
//	dedup.leases.lost                   counter           claims another delivery took over
//	dedup.results.not_stored            counter           successes whose outcome the store may not hold
//	dedup.bypassed                      counter           handled unprotected: store down, fail-open
//	dedup.dead_letters                  counter           dead letters the broker took, by dedup.reason
//	dedup.settle.failures               counter           acks, retries, dead letters that failed, by dedup.decision
//	dedup.handlers.active               up-down counter   deliveries started and not yet settled
//
// The messaging.* metrics carry messaging.system, messaging.operation.name
// "process", the destination, messaging.consumer.group.name,
// server.address, server.port and error.type (the reason) for a failed
// delivery; the dedup.* ones dedup.namespace, messaging.system and the
// destination (dedup.handlers.active only the last two: the namespace is
// not known when a delivery starts). The destination is
// messaging.destination.name, or, when the delivery's origin has a
// template (delivery.Origin.DestinationTemplate: a subject that carries an
// id, orders.<id>, named orders.*), messaging.destination.template, with
// the name only when it is the template itself: a name with an id would
// make a series per message.
//
// Over no-op providers (trace/noop, metric/noop) the Observer does no work
// at all.
package dedupotel
