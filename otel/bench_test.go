package dedupotel_test

import (
	"context"
	"strconv"
	"testing"

	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
	dedupotel "github.com/dedup-go/dedup/otel"
	"github.com/dedup-go/dedup/store/memstore"
)

// BenchmarkHandle: a new message and a duplicate through Handle over
// memstore, with no Observer, with dedupotel over no-op providers, and
// with dedupotel over the SDK (an in-memory exporter, a manual reader).
// The messages are Kafka's with a traceparent header.
func BenchmarkHandle(b *testing.B) {
	ctx := context.Background()
	_, h := producer(b)
	exp := tracetest.NewInMemoryExporter()
	observers := []struct {
		name string
		obs  func(b *testing.B) delivery.Observer
	}{
		{"observer=none", func(*testing.B) delivery.Observer { return nil }},
		{"observer=empty-func", func(*testing.B) delivery.Observer {
			return delivery.ObserverFunc(func(context.Context, delivery.Event) {})
		}},
		{"observer=otel-noop", func(b *testing.B) delivery.Observer {
			return newObserver(b, tracenoop.NewTracerProvider(), metricnoop.NewMeterProvider())
		}},
		{"observer=otel-sdk", func(b *testing.B) delivery.Observer {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			b.Cleanup(func() { _ = tp.Shutdown(ctx); _ = mp.Shutdown(ctx) })
			return newObserver(b, tp, mp)
		}},
	}
	for _, o := range observers {
		for _, kind := range []string{"new", "duplicate"} {
			b.Run(o.name+"/"+kind, func(b *testing.B) {
				st, err := memstore.New(nil)
				if err != nil {
					b.Fatal(err)
				}
				rcv, err := dedup.NewReceiver(st, func(m msg) (string, error) { return m.Body.ID, nil },
					func(ctx context.Context, m msg) (struct{}, error) { return struct{}{}, nil },
					&dedup.Config{Observer: o.obs(b)})
				if err != nil {
					b.Fatal(err)
				}
				msgs := make([]msg, 1)
				if kind == "new" {
					msgs = make([]msg, b.N)
				}
				for i := range msgs {
					msgs[i] = kafkaMsg(strconv.Itoa(i), 1, h)
				}
				if kind == "duplicate" {
					if _, err := rcv.Handle(ctx, msgs[0]); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					m := msgs[0]
					if kind == "new" {
						m = msgs[i]
					}
					if _, err := rcv.Handle(ctx, m); err != nil {
						b.Fatal(err)
					}
					if i%4096 == 0 {
						exp.Reset()
					}
				}
			})
		}
	}
}

func newObserver(b *testing.B, tp trace.TracerProvider, mp metric.MeterProvider) *dedupotel.Observer {
	ob, err := dedupotel.New(&dedupotel.Options{TracerProvider: tp, MeterProvider: mp, Propagator: propagation.TraceContext{}})
	if err != nil {
		b.Fatal(err)
	}
	return ob
}
