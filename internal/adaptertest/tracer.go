package adaptertest

import (
	"context"
	"strconv"
	"sync"

	"github.com/dedup-go/dedup/delivery"
)

// Tracer is an Observer that stands for a tracing one in the adapters'
// tests: it starts each delivery with a span of its own in the context,
// records every event with the span its context carried and the
// traceparent each delivery's message had, and injects the span of a
// context as a "traceparent" header (a delivery.Injector).
type Tracer struct {
	mu      sync.Mutex
	started int
	links   map[string]string // span -> the traceparent its message carried
	events  []delivery.Event
	spans   []string
}

var (
	_ delivery.DeliveryStarter = (*Tracer)(nil)
	_ delivery.Injector        = (*Tracer)(nil)
)

type spanKey struct{}

// WithSpan returns ctx carrying span, as a producer's traced context would.
func WithSpan(ctx context.Context, span string) context.Context {
	return context.WithValue(ctx, spanKey{}, span)
}

// SpanOf returns the span ctx carries, if any.
func SpanOf(ctx context.Context) (string, bool) {
	s, ok := ctx.Value(spanKey{}).(string)
	return s, ok
}

// StartDelivery starts a span named after the delivery's place and count:
// "span-<n>-<message id>-<source>-<offset>-<delivery count>".
func (tr *Tracer) StartDelivery(ctx context.Context, o delivery.Origin) context.Context {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.started++
	span := "span-" + strconv.Itoa(tr.started) + "-" + o.MessageID + "-" + o.Source + "-" +
		strconv.FormatInt(o.Offset, 10) + "-" + strconv.Itoa(o.DeliveryCount)
	if o.Header != nil {
		if tp, ok := o.Header.Get("traceparent"); ok {
			if tr.links == nil {
				tr.links = map[string]string{}
			}
			tr.links[span] = tp
		}
	}
	return WithSpan(ctx, span)
}

// Observe records e and the span of ctx.
func (tr *Tracer) Observe(ctx context.Context, e delivery.Event) {
	span, _ := SpanOf(ctx)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.events = append(tr.events, e)
	tr.spans = append(tr.spans, span)
}

// Inject sets "traceparent" to the span of ctx, if it carries one.
func (tr *Tracer) Inject(ctx context.Context, set func(key, value string)) {
	if span, ok := SpanOf(ctx); ok {
		set("traceparent", span)
	}
}

// Snapshot returns the events so far, the span each was observed with,
// and how many deliveries were started.
func (tr *Tracer) Snapshot() (events []delivery.Event, spans []string, started int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]delivery.Event(nil), tr.events...), append([]string(nil), tr.spans...), tr.started
}

// Count returns how many events were observed.
func (tr *Tracer) Count() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.events)
}

// Link returns the traceparent the message of span's delivery carried.
func (tr *Tracer) Link(span string) string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.links[span]
}

// Reasons counts the events by their decision's reason.
func (tr *Tracer) Reasons() map[delivery.Reason]int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := map[delivery.Reason]int{}
	for _, e := range tr.events {
		out[e.Decision.Reason]++
	}
	return out
}
