package dedupotel

import (
	"cmp"
	"context"
	"errors"
	"sync"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// The metric names (OpenTelemetry's; a Prometheus exporter adds _total to
// counters and _seconds to the durations).
const (
	MetricProcessDuration  = "messaging.process.duration"
	MetricConsumedMessages = "messaging.client.consumed.messages"
	MetricDeliveries       = "dedup.deliveries"
	MetricStoreDuration    = "dedup.store.duration"
	MetricHandlerDuration  = "dedup.handler.duration"
	MetricLeasesLost       = "dedup.leases.lost"
	MetricResultsNotStored = "dedup.results.not_stored"
	MetricBypassed         = "dedup.bypassed"
	MetricDeadLetters      = "dedup.dead_letters"
	MetricSettleFailures   = "dedup.settle.failures"
	MetricHandlersActive   = "dedup.handlers.active"
)

// messagingBuckets are the bucket boundaries messaging semconv recommends
// for its durations; storeBuckets reach down to a fast store's round
// trip.
var (
	messagingBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}
	storeBuckets     = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}
)

type instruments struct {
	processDuration, storeDuration, handlerDuration                    metric.Float64Histogram
	consumed, deliveries, leasesLost, notStored, bypassed, deadLetters metric.Int64Counter
	settleFailures                                                     metric.Int64Counter
	active                                                             metric.Int64UpDownCounter
}

func (m *instruments) init(meter metric.Meter) error {
	var errs []error
	hist := func(name, desc string, buckets []float64) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	m.processDuration = hist(MetricProcessDuration, "Time the receiver took to handle a delivery: claim, handler, completion.", messagingBuckets)
	m.storeDuration = hist(MetricStoreDuration, "Time a delivery waited on the dedup store, by operation (claim, complete) and store.", storeBuckets)
	m.handlerDuration = hist(MetricHandlerDuration, "Time the handler ran, for the deliveries that ran it.", messagingBuckets)
	m.consumed = counter(MetricConsumedMessages, "{message}", "Messages handed to the receiver by a broker adapter.")
	m.deliveries = counter(MetricDeliveries, "{delivery}", "Deliveries by what the receiver did (status) and what was done with them (decision, reason).")
	m.leasesLost = counter(MetricLeasesLost, "{delivery}", "Deliveries whose claim another delivery took over.")
	m.notStored = counter(MetricResultsNotStored, "{delivery}", "Successes whose result or completion could not be stored: a redelivery may run the handler again.")
	m.bypassed = counter(MetricBypassed, "{delivery}", "Deliveries handled without protection: the store was down and the receiver fails open.")
	m.deadLetters = counter(MetricDeadLetters, "{message}", "Dead letters the broker took, by reason.")
	m.settleFailures = counter(MetricSettleFailures, "{delivery}", "Acks, retries and dead letters that failed; the broker redelivers.")
	var err error
	m.active, err = meter.Int64UpDownCounter(MetricHandlersActive, metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries being handled: started, not yet settled."))
	errs = append(errs, err)
	return errors.Join(errs...)
}

// record records the metrics of e.
func (ob *Observer) record(ctx context.Context, e *delivery.Event) {
	a := ob.attrs.of(e)
	m := &ob.m
	m.deliveries.Add(ctx, 1, a.deliveries...)
	if e.Broker != "" && !server(e.Broker) {
		m.consumed.Add(ctx, 1, a.messagingAdd...)
		if e.Duration > 0 {
			m.processDuration.Record(ctx, e.Duration.Seconds(), a.messagingRecord...)
		}
	}
	if e.Duration > 0 { // the receiver handled it (a claim of 0 s: answered from memory)
		m.storeDuration.Record(ctx, e.ClaimDuration.Seconds(), a.storeClaim...)
	}
	if e.CompleteDuration > 0 {
		m.storeDuration.Record(ctx, e.CompleteDuration.Seconds(), a.storeComplete...)
	}
	if e.HandlerDuration > 0 {
		m.handlerDuration.Record(ctx, e.HandlerDuration.Seconds(), a.baseRecord...)
	}
	if e.Problem != nil || e.Err != nil {
		if errors.Is(e.Problem, dedup.ErrLeaseLost) || errors.Is(e.Err, dedup.ErrLeaseLost) {
			m.leasesLost.Add(ctx, 1, a.baseAdd...)
		}
		if errors.Is(e.Problem, dedup.ErrResultNotStored) {
			m.notStored.Add(ctx, 1, a.baseAdd...)
		}
	}
	if e.Status == delivery.StatusBypassed {
		m.bypassed.Add(ctx, 1, a.baseAdd...)
	}
	if e.Settled {
		switch {
		case e.SettleErr != nil:
			m.settleFailures.Add(ctx, 1, a.settleFailure...)
		case e.Decision.Action == delivery.DeadLetter:
			m.deadLetters.Add(ctx, 1, a.deadLetter...)
		}
	}
}

// maxCached bounds the attribute cache: past it (a destination name that
// is not bounded after all), attributes are built for each delivery.
const maxCached = 4096

// attrCache keeps the measurement options of each combination of bounded
// attributes, so that recording a delivery allocates nothing.
type attrCache struct {
	group   string
	mu      sync.RWMutex
	events  map[eventKey]*eventAttrs
	actives map[destination][]metric.AddOption
}

type eventKey struct {
	destination
	ns, store, group string
	server           string
	port             int
	status           delivery.Status
	action           delivery.Action
	reason           delivery.Reason
	failed           bool
}

// destination is how metrics name a delivery's destination: the system,
// the template, and the name when it is bounded (no template, or the
// template is the name itself, a literal subject). A name that differs
// from its template may carry an id: one series per message.
type destination struct{ system, name, template string }

func destinationOf(o *delivery.Origin) destination {
	d := destination{system: o.Broker, name: o.Source, template: o.DestinationTemplate}
	if d.template != "" && d.template != d.name {
		d.name = ""
	}
	return d
}

// attrs are the destination's attributes.
func (d destination) attrs(kv []attribute.KeyValue) []attribute.KeyValue {
	if d.system != "" {
		kv = append(kv, semconv.MessagingSystemKey.String(d.system))
	}
	if d.name != "" {
		kv = append(kv, semconv.MessagingDestinationName(d.name))
	}
	if d.template != "" {
		kv = append(kv, semconv.MessagingDestinationTemplate(d.template))
	}
	return kv
}

// eventAttrs are the options of one eventKey, per instrument.
type eventAttrs struct {
	deliveries      []metric.AddOption    // dedup.deliveries
	messagingAdd    []metric.AddOption    // messaging.client.consumed.messages
	messagingRecord []metric.RecordOption // messaging.process.duration
	baseAdd         []metric.AddOption    // namespace, system, destination
	baseRecord      []metric.RecordOption
	deadLetter      []metric.AddOption    // base and reason
	settleFailure   []metric.AddOption    // base and decision
	storeClaim      []metric.RecordOption // dedup.store.duration of the claim
	storeComplete   []metric.RecordOption // and of the completion
}

func (c *attrCache) of(e *delivery.Event) *eventAttrs {
	k := eventKey{destination: destinationOf(&e.Origin), ns: e.Namespace, store: e.Store, group: cmp.Or(c.group, e.ConsumerGroup),
		server: e.ServerAddress, port: e.ServerPort, status: e.Status, action: e.Decision.Action, reason: e.Decision.Reason,
		failed: e.Err != nil}
	c.mu.RLock()
	a, ok := c.events[k]
	c.mu.RUnlock()
	if ok {
		return a
	}
	a = c.build(k)
	c.mu.Lock()
	if c.events == nil {
		c.events = make(map[eventKey]*eventAttrs)
	}
	if len(c.events) < maxCached {
		c.events[k] = a
	}
	c.mu.Unlock()
	return a
}

func (c *attrCache) build(k eventKey) *eventAttrs {
	var base []attribute.KeyValue
	if k.ns != "" {
		base = append(base, attribute.String("dedup.namespace", k.ns))
	}
	base = k.destination.attrs(base)
	with := func(kv ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(append(append([]attribute.KeyValue(nil), base...), kv...)...))
	}
	baseOpt := with()
	dl := with(attribute.String("dedup.decision", k.action.String()), attribute.String("dedup.reason", string(k.reason)),
		attribute.String("dedup.status", k.status.String()))

	msg := k.destination.attrs([]attribute.KeyValue{semconv.MessagingOperationName("process")})
	if k.group != "" {
		msg = append(msg, semconv.MessagingConsumerGroupName(k.group))
	}
	if k.server != "" {
		msg = append(msg, semconv.ServerAddress(k.server))
	}
	if k.port > 0 {
		msg = append(msg, semconv.ServerPort(k.port))
	}
	if k.failed {
		reason := string(k.reason)
		if reason == "" {
			reason = semconv.ErrorTypeOther.Value.AsString()
		}
		msg = append(msg, semconv.ErrorTypeKey.String(reason))
	}
	msgOpt := metric.WithAttributeSet(attribute.NewSet(msg...))
	return &eventAttrs{
		deliveries:      []metric.AddOption{dl},
		messagingAdd:    []metric.AddOption{msgOpt},
		messagingRecord: []metric.RecordOption{msgOpt},
		baseAdd:         []metric.AddOption{baseOpt},
		baseRecord:      []metric.RecordOption{baseOpt},
		deadLetter:      []metric.AddOption{with(attribute.String("dedup.reason", string(k.reason)))},
		settleFailure:   []metric.AddOption{with(attribute.String("dedup.decision", k.action.String()))},
		storeClaim:      []metric.RecordOption{with(attribute.String("dedup.store", k.store), attribute.String("dedup.store.operation", "claim"))},
		storeComplete:   []metric.RecordOption{with(attribute.String("dedup.store", k.store), attribute.String("dedup.store.operation", "complete"))},
	}
}

// activeOf returns dedup.handlers.active's options for a delivery from o.
func (c *attrCache) activeOf(o *delivery.Origin) []metric.AddOption {
	k := destinationOf(o)
	c.mu.RLock()
	a, ok := c.actives[k]
	c.mu.RUnlock()
	if ok {
		return a
	}
	a = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(k.attrs(nil)...))}
	c.mu.Lock()
	if c.actives == nil {
		c.actives = make(map[destination][]metric.AddOption)
	}
	if len(c.actives) < maxCached {
		c.actives[k] = a
	}
	c.mu.Unlock()
	return a
}
