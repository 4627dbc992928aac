package dedupotel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of the Observer's tracer and
// meter.
const ScopeName = "github.com/dedup-go/dedup/otel"

// Options configure an Observer. A nil *Options, or a nil field, means
// the global one (otel.GetTracerProvider, otel.GetMeterProvider,
// otel.GetTextMapPropagator).
type Options struct {
	// TracerProvider makes the delivery spans.
	TracerProvider trace.TracerProvider
	// MeterProvider makes the metrics.
	MeterProvider metric.MeterProvider
	// Propagator reads the producer's trace context from a message's
	// headers and writes it into what adapters publish. Nil means the
	// global propagator as it is when New is called, or W3C TraceContext
	// and Baggage when none is set (the global one propagates nothing
	// until otel.SetTextMapPropagator is called).
	Propagator propagation.TextMapPropagator
	// ConsumerGroup is messaging.consumer.group.name on the spans and the
	// messaging.* metrics of every delivery, whatever its adapter says.
	// Defaults to the group the delivery's adapter reports
	// (delivery.Origin.ConsumerGroup: the JetStream consumer's name, the core
	// NATS queue group, the Kafka reader's GroupID; none for RabbitMQ),
	// and to none without one.
	ConsumerGroup string
}

// Observer traces and measures deliveries with OpenTelemetry: it is a
// delivery.Observer, a delivery.DeliveryStarter and a delivery.Injector. Make it
// with New and set it as dedup.Config.Observer. It is safe for concurrent
// use.
type Observer struct {
	tracer   trace.Tracer
	tracing  bool // false for a noop.TracerProvider: no span work at all
	metering bool // false for a noop.MeterProvider: no metric work at all
	prop     propagation.TextMapPropagator
	group    string
	m        instruments
	attrs    attrCache
}

var (
	_ delivery.Observer        = (*Observer)(nil)
	_ delivery.DeliveryStarter = (*Observer)(nil)
	_ delivery.Injector        = (*Observer)(nil)
	_ delivery.Quiet           = (*Observer)(nil)
)

// New returns an Observer made with opts; nil opts means the global
// providers and propagator. It fails only when the MeterProvider refuses
// an instrument.
func New(opts *Options) (*Observer, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	if o.MeterProvider == nil {
		o.MeterProvider = otel.GetMeterProvider()
	}
	if o.Propagator == nil {
		o.Propagator = otel.GetTextMapPropagator()
		if len(o.Propagator.Fields()) == 0 {
			o.Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
		}
	}
	_, noTracing := o.TracerProvider.(tracenoop.TracerProvider)
	_, noMetering := o.MeterProvider.(metricnoop.MeterProvider)
	ob := &Observer{
		tracer:   o.TracerProvider.Tracer(ScopeName),
		tracing:  !noTracing,
		metering: !noMetering,
		prop:     o.Propagator,
		group:    o.ConsumerGroup,
	}
	ob.attrs.group = o.ConsumerGroup
	if err := ob.m.init(o.MeterProvider.Meter(ScopeName)); err != nil {
		return nil, fmt.Errorf("dedupotel: %w", err)
	}
	return ob, nil
}

// deliverySpan is the span StartDelivery puts in the delivery's context: the
// Observer's own span, or, for HTTP and gRPC, the server span it
// annotates. It marks the context as one StartDelivery made, so that
// Observe ends only a span it started and counts a delivery that ends
// only once in dedup.handlers.active.
type deliverySpan struct {
	trace.Span
	ob       *Observer
	own      bool // the Observer started Span: Observe ends it
	annotate bool // Span is an HTTP or gRPC server span: Observe annotates it
	ended    bool
	active   []metric.AddOption // dedup.handlers.active's attributes; nil: not counted
}

// server reports whether broker names a request-response middleware,
// whose request already has a server span.
func server(broker string) bool { return broker == "http" || broker == "grpc" }

// StartDelivery starts the delivery's span: a CONSUMER span named
// "process <destination>" (o.DestinationTemplate when there is one, else
// o.Source), child of the span in ctx, linked to the producer's span when
// o.Header carries a trace context. For an HTTP or
// gRPC origin it starts none: the server span in ctx is the delivery's,
// and Observe annotates it. The context returned carries the span, so the
// handler's spans nest under it.
func (ob *Observer) StartDelivery(ctx context.Context, o delivery.Origin) context.Context {
	if !ob.tracing && !ob.metering {
		return ctx
	}
	var active []metric.AddOption
	if ob.metering && ob.m.active.Enabled(ctx) {
		active = ob.attrs.activeOf(&o)
		ob.m.active.Add(ctx, 1, active...)
	}
	switch {
	case server(o.Broker):
		if active == nil {
			return ctx
		}
		return trace.ContextWithSpan(ctx, &deliverySpan{Span: trace.SpanFromContext(ctx), ob: ob, annotate: true, active: active})
	case ob.tracing:
		span := ob.start(ctx, o, time.Time{})
		return trace.ContextWithSpan(ctx, &deliverySpan{Span: span, ob: ob, own: true, active: active})
	case active != nil:
		return trace.ContextWithSpan(ctx, &deliverySpan{Span: trace.SpanFromContext(ctx), ob: ob, active: active})
	}
	return ctx
}

// start starts the span of a delivery from o, at the given time when not
// zero.
func (ob *Observer) start(ctx context.Context, o delivery.Origin, at time.Time) trace.Span {
	var kv [14]attribute.KeyValue
	attrs := append(kv[:0], semconv.MessagingOperationTypeProcess, semconv.MessagingOperationName("process"))
	if o.Broker != "" {
		attrs = append(attrs, semconv.MessagingSystemKey.String(o.Broker))
	}
	name := "process"
	if dest := cmp.Or(o.DestinationTemplate, o.Source); dest != "" {
		// The conventions name the span after the template: the name may
		// carry an id, and a span name is grouped on like a metric's
		// attribute.
		name = "process " + dest
	}
	if o.Source != "" {
		attrs = append(attrs, semconv.MessagingDestinationName(o.Source))
	}
	if o.DestinationTemplate != "" {
		attrs = append(attrs, semconv.MessagingDestinationTemplate(o.DestinationTemplate))
	}
	if group := cmp.Or(ob.group, o.ConsumerGroup); group != "" {
		attrs = append(attrs, semconv.MessagingConsumerGroupName(group))
	}
	if o.ServerAddress != "" {
		attrs = append(attrs, semconv.ServerAddress(o.ServerAddress))
	}
	if o.ServerPort > 0 {
		attrs = append(attrs, semconv.ServerPort(o.ServerPort))
	}
	if o.Broker == "kafka" {
		attrs = append(attrs, semconv.MessagingDestinationPartitionID(itoa(o.Partition)), semconv.MessagingKafkaOffset(int(o.Offset)))
	}
	if o.MessageID != "" {
		attrs = append(attrs, semconv.MessagingMessageID(o.MessageID))
	}
	if o.DeliveryCount > 0 {
		attrs = append(attrs, attribute.Int("dedup.delivery_count", o.DeliveryCount))
	}
	opts := make([]trace.SpanStartOption, 0, 4)
	opts = append(opts, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	if o.Header != nil {
		pctx := ob.prop.Extract(context.Background(), headerCarrier{o.Header})
		if sc := trace.SpanContextFromContext(pctx); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
	}
	if !at.IsZero() {
		opts = append(opts, trace.WithTimestamp(at))
	}
	_, span := ob.tracer.Start(ctx, name, opts...)
	return span
}

// Quiet reports whether the Observer records nothing (both its providers
// are no-op): a receiver then never calls it (delivery.Quiet), so it costs a
// delivery nothing; Inject still works.
func (ob *Observer) Quiet() bool { return !ob.tracing && !ob.metering }

// Observe ends the delivery's span (the one StartDelivery started, or
// for an HTTP or gRPC origin annotates the server span in ctx) with what
// e tells, and records the delivery's metrics. A delivery StartDelivery
// never saw (one an adapter returned unhandled at Stop) gets a span
// started and ended now.
func (ob *Observer) Observe(ctx context.Context, e delivery.Event) {
	if !ob.tracing && !ob.metering {
		return
	}
	d, _ := trace.SpanFromContext(ctx).(*deliverySpan)
	if d != nil && (d.ob != ob || d.ended) {
		d = nil
	}
	if d != nil {
		d.ended = true
		if d.active != nil {
			ob.m.active.Add(ctx, -1, d.active...)
		}
	}
	switch {
	case server(e.Broker):
		span := trace.SpanFromContext(ctx)
		if d != nil {
			span = d.Span
		}
		if span.IsRecording() {
			ob.annotate(span, &e)
		}
	case d != nil && d.own:
		ob.end(d.Span, &e, time.Now())
	case d == nil && ob.tracing:
		now := time.Now()
		ob.end(ob.start(ctx, e.Origin, now.Add(-e.Duration-e.SettleDuration)), &e, now)
	}
	if ob.metering && ob.m.deliveries.Enabled(ctx) {
		ob.record(ctx, &e)
	}
}

// end adds what e tells to span and ends it at now.
func (ob *Observer) end(span trace.Span, e *delivery.Event, now time.Time) {
	if !span.IsRecording() {
		span.End()
		return
	}
	var kv [12]attribute.KeyValue
	attrs := append(kv[:0],
		attribute.String("dedup.status", e.Status.String()),
		attribute.String("dedup.decision", e.Decision.Action.String()),
		attribute.String("dedup.reason", string(e.Decision.Reason)),
		attribute.Int("dedup.attempt", e.Attempt),
		attribute.Bool("dedup.stored", e.Stored),
		attribute.Float64("dedup.store.duration", e.StoreDuration.Seconds()),
		attribute.Float64("dedup.handler.duration", e.HandlerDuration.Seconds()),
	)
	if e.Namespace != "" {
		attrs = append(attrs, attribute.String("dedup.namespace", e.Namespace))
	}
	if e.Key != "" {
		attrs = append(attrs, attribute.String("dedup.key", e.Key))
	}
	if e.Problem != nil {
		attrs = append(attrs, attribute.String("dedup.problem", e.Problem.Error()))
	}
	if e.Err != nil {
		attrs = append(attrs, semconv.ErrorTypeKey.String(errorType(e)))
	}
	span.SetAttributes(attrs...)
	if e.Settled {
		ev := [5]attribute.KeyValue{
			semconv.MessagingOperationTypeSettle,
			attribute.String("dedup.decision", e.Decision.Action.String()),
			attribute.String("dedup.reason", string(e.Decision.Reason)),
			attribute.Float64("dedup.settle.duration", e.SettleDuration.Seconds()),
		}
		n := 4
		if e.SettleErr != nil {
			ev[4], n = attribute.String("dedup.settle.error", e.SettleErr.Error()), 5
		}
		span.AddEvent("settle", trace.WithTimestamp(now.Add(-e.SettleDuration)), trace.WithAttributes(ev[:n]...))
	}
	switch {
	case e.Err != nil:
		span.SetStatus(codes.Error, e.Err.Error())
	case e.Settled && e.SettleErr != nil:
		span.SetStatus(codes.Error, "settle: "+e.SettleErr.Error())
	}
	span.End(trace.WithTimestamp(now))
}

// annotate adds to an HTTP or gRPC server span what the receiver did.
func (ob *Observer) annotate(span trace.Span, e *delivery.Event) {
	var kv [8]attribute.KeyValue
	attrs := append(kv[:0],
		attribute.String("dedup.status", e.Status.String()),
		attribute.String("dedup.reason", string(e.Decision.Reason)),
		attribute.Int("dedup.attempt", e.Attempt),
		attribute.Bool("dedup.replayed", e.Status == delivery.StatusDuplicate),
		attribute.Bool("dedup.in_flight", e.Status == delivery.StatusInFlight),
		attribute.Bool("dedup.key_reused", errors.Is(e.Err, dedup.ErrKeyReused)),
	)
	if e.Namespace != "" {
		attrs = append(attrs, attribute.String("dedup.namespace", e.Namespace))
	}
	if e.Key != "" {
		attrs = append(attrs, attribute.String("dedup.key", e.Key))
	}
	span.SetAttributes(attrs...)
}

// errorType is error.type for a failed delivery: the decision's reason,
// a bounded value.
func errorType(e *delivery.Event) string {
	if e.Decision.Reason != "" {
		return string(e.Decision.Reason)
	}
	return semconv.ErrorTypeOther.Value.AsString()
}

// Inject writes the trace context of ctx (and its baggage, with the
// default propagator) through set, with the Observer's propagator:
// adapters call it, through dedup.Receiver.Inject, on the dead letters
// and retry copies they publish.
func (ob *Observer) Inject(ctx context.Context, set func(key, value string)) {
	if set == nil {
		return
	}
	ob.prop.Inject(ctx, setCarrier(set))
}

// headerCarrier reads an Origin's headers for a propagator.
type headerCarrier struct{ h delivery.Header }

func (c headerCarrier) Get(key string) string { v, _ := c.h.Get(key); return v }
func (c headerCarrier) Set(string, string)    {}

func (c headerCarrier) Keys() []string {
	var keys []string
	for k := range c.h.All() {
		keys = append(keys, k)
	}
	return keys
}

// setCarrier writes headers for a propagator.
type setCarrier func(key, value string)

func (s setCarrier) Get(string) string     { return "" }
func (s setCarrier) Set(key, value string) { s(key, value) }
func (s setCarrier) Keys() []string        { return nil }

// itoa formats small non-negative ints (partitions) without fmt.
func itoa(n int) string {
	if n >= 0 && n < len(smallInts) {
		return smallInts[n]
	}
	return fmt.Sprint(n)
}

var smallInts = func() (s [64]string) {
	for i := range s {
		s[i] = fmt.Sprint(i)
	}
	return s
}()
