package dedupotel_test

import (
	"context"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	dedupotel "github.com/dedup-go/dedup/otel"
	"github.com/dedup-go/dedup/store/memstore"
)

// Example wires the Observer into a receiver: each delivery is a CONSUMER
// span, the handler's spans nest under it, and the producer's span (the
// message's traceparent) is linked.
func Example() {
	ctx := context.Background()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer func() { _ = tp.Shutdown(ctx) }()

	obs, err := dedupotel.New(&dedupotel.Options{TracerProvider: tp, ConsumerGroup: "billing"})
	if err != nil {
		panic(err)
	}
	st, err := memstore.New(nil)
	if err != nil {
		panic(err)
	}
	type order struct{ ID string }
	rcv, err := dedup.NewReceiver(st,
		func(m *dedup.Message[order]) (string, error) { return m.Body.ID, nil },
		func(ctx context.Context, m *dedup.Message[order]) (string, error) {
			_, span := tp.Tracer("billing").Start(ctx, "charge")
			defer span.End()
			return "charged " + m.Body.ID, nil
		},
		&dedup.Config{Observer: obs})
	if err != nil {
		panic(err)
	}

	// What an adapter does with each message.
	m := &dedup.Message[order]{Body: order{ID: "o-1"}, Broker: "kafka", Source: "orders",
		Header: delivery.MapHeader{"traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}}
	for range 2 {
		d := adapter.Bind(rcv).Deliver(ctx, m)
		// ... ack, retry or dead-letter as d.Decision says, then:
		d.Settled(adapter.Settlement{})
	}

	for _, s := range spans.Ended() {
		var status string
		for _, kv := range s.Attributes() {
			if kv.Key == "dedup.status" {
				status = kv.Value.AsString()
			}
		}
		fmt.Println(s.Name(), s.SpanKind(), status, "links:", len(s.Links()))
	}
	// Output:
	// charge internal  links: 0
	// process orders consumer processed links: 1
	// process orders consumer duplicate links: 1
}
