package dedupotel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
	dedupotel "github.com/dedup-go/dedup/otel"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
)

type order struct {
	ID     string
	Amount int // negative: declined for good; zero: a handler error
}

type msg = *dedup.Message[order]

// env is one Observer over an SDK tracer provider recording every span and
// a meter provider read by hand.
type env struct {
	tp     *sdktrace.TracerProvider
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	obs    *dedupotel.Observer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, dedupotel.Options{Propagator: propagation.TraceContext{}, ConsumerGroup: "billing-workers"})
}

// newEnvWith is newEnv with the Observer's options opts, its providers
// set by the env.
func newEnvWith(t *testing.T, opts dedupotel.Options) *env {
	t.Helper()
	e := &env{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	e.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(e.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))
	t.Cleanup(func() {
		require.NoError(t, e.tp.Shutdown(context.Background()))
		require.NoError(t, mp.Shutdown(context.Background()))
	})
	opts.TracerProvider, opts.MeterProvider = e.tp, mp
	var err error
	e.obs, err = dedupotel.New(&opts)
	require.NoError(t, err)
	return e
}

// receiver returns a receiver over memstore whose handler starts a span
// "charge" of its own under its context, fails orders with a zero amount
// (retryable) and declines negative ones for good.
func (e *env) receiver(t *testing.T, during func(ctx context.Context)) *dedup.Receiver[msg, string] {
	t.Helper()
	st, err := memstore.New(nil)
	require.NoError(t, err)
	tracer := e.tp.Tracer("handler")
	rcv, err := dedup.NewReceiver(st, func(m msg) (string, error) { return m.Body.ID, nil },
		func(ctx context.Context, m msg) (string, error) {
			ctx, span := tracer.Start(ctx, "charge")
			defer span.End()
			if during != nil {
				during(ctx)
			}
			switch {
			case m.Body.Amount < 0:
				return "", dedup.Permanent(errors.New("declined"))
			case m.Body.Amount == 0:
				return "", errors.New("card service down")
			}
			return "charged " + m.Body.ID, ctx.Err()
		}, &dedup.Config{Namespace: "billing", Observer: e.obs, MaxAttempts: 5})
	require.NoError(t, err)
	return rcv
}

// ended returns the ended spans named name.
func (e *env) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range e.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// kafkaMsg is an order from the Kafka topic orders, partition 3, with
// header h.
func kafkaMsg(id string, amount int, h delivery.MapHeader) msg {
	return &dedup.Message[order]{Body: order{ID: id, Amount: amount}, ID: "m-" + id, Broker: "kafka", Source: "orders",
		Stream: "orders", Partition: 3, Offset: 42, DeliveryCount: 1, Header: h}
}

// attrs returns a span's attributes by key.
func attrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

// producer is a producer's span context, as a traceparent carries it.
func producer(t testing.TB) (trace.SpanContext, delivery.MapHeader) {
	t.Helper()
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x0a, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
		SpanID:     trace.SpanID{0x0b, 1, 2, 3, 4, 5, 6, 7},
		TraceFlags: trace.FlagsSampled,
		Remote:     true,
	})
	h := delivery.MapHeader{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), propagation.HeaderCarrier(h))
	// HeaderCarrier canonicalises the name; brokers keep what the producer
	// wrote, which OTel propagators write in lower case.
	h["traceparent"] = h["Traceparent"]
	delete(h, "Traceparent")
	require.NotEmpty(t, h["traceparent"])
	return sc, h
}

// collect reads the metrics.
func (e *env) collect(t *testing.T) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, e.reader.Collect(context.Background(), &rm))
	return rm
}

func find(rm metricdata.ResourceMetrics, name string) (metricdata.Metrics, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// matches reports whether set holds every kv of want.
func matches(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// sum returns the sum of the points of the counter name whose attributes
// hold want, and fails when a point holds a forbidden key.
func sum(t *testing.T, rm metricdata.ResourceMetrics, name string, want ...attribute.KeyValue) int64 {
	t.Helper()
	m, ok := find(rm, name)
	if !ok {
		return 0
	}
	var n int64
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			noUnbounded(t, name, p.Attributes)
			if matches(p.Attributes, want) {
				n += p.Value
			}
		}
	default:
		t.Fatalf("%s is a %T", name, m.Data)
	}
	return n
}

// count returns the number of measurements of the histogram name whose
// attributes hold want.
func count(t *testing.T, rm metricdata.ResourceMetrics, name string, want ...attribute.KeyValue) uint64 {
	t.Helper()
	m, ok := find(rm, name)
	if !ok {
		return 0
	}
	d, ok := m.Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s is a %T", name, m.Data)
	var n uint64
	for _, p := range d.DataPoints {
		noUnbounded(t, name, p.Attributes)
		if matches(p.Attributes, want) {
			n += p.Count
		}
	}
	return n
}

// noUnbounded fails when a metric's point holds an attribute with a value
// per message: a key, a message id, an offset, an attempt, or a
// destination name that differs from its template (a subject with an id).
func noUnbounded(t *testing.T, name string, set attribute.Set) {
	t.Helper()
	for _, k := range []attribute.Key{"dedup.key", "messaging.message.id", "messaging.kafka.offset", "dedup.attempt"} {
		_, ok := set.Value(k)
		require.False(t, ok, "%s has the unbounded attribute %s", name, k)
	}
	if tmpl, ok := set.Value("messaging.destination.template"); ok {
		if dest, ok := set.Value("messaging.destination.name"); ok {
			require.Equal(t, tmpl, dest, "%s names a destination with a template by its name", name)
		}
	}
}

// points returns the attributes of every point of every metric, by
// metric name, checking each with noUnbounded.
func points(t *testing.T, rm metricdata.ResourceMetrics) map[string][]attribute.Set {
	t.Helper()
	out := map[string][]attribute.Set{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], p.Attributes)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], p.Attributes)
				}
			default:
				t.Fatalf("%s is a %T", m.Name, m.Data)
			}
		}
	}
	for name, sets := range out {
		for _, set := range sets {
			noUnbounded(t, name, set)
		}
	}
	return out
}

// downStore is a memstore whose Acquire fails while down is set (a store
// outage, as the receiver sees it).
type downStore struct {
	mem  *memstore.Store
	down bool
}

func (s *downStore) Acquire(ctx context.Context, req store.AcquireRequest) (store.Claim, error) {
	if s.down {
		return store.Claim{}, fmt.Errorf("%w: connection refused", store.ErrUnavailable)
	}
	return s.memstore().Acquire(ctx, req)
}

func (s *downStore) Complete(ctx context.Context, req store.CompleteRequest) error {
	return s.memstore().Complete(ctx, req)
}

func (s *downStore) Release(ctx context.Context, req store.ReleaseRequest) error {
	return s.memstore().Release(ctx, req)
}

func (s *downStore) Extend(ctx context.Context, req store.ExtendRequest) error {
	return s.memstore().Extend(ctx, req)
}

func (s *downStore) memstore() *memstore.Store {
	if s.mem == nil {
		s.mem, _ = memstore.New(nil)
	}
	return s.mem
}
