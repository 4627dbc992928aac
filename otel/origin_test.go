package dedupotel_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	dedupotel "github.com/dedup-go/dedup/otel"
)

// jetStreamMsg is an order from the JetStream subject subject of the
// stream ORDERS.
func jetStreamMsg(id, subject string, amount int) msg {
	return &dedup.Message[order]{Body: order{ID: id, Amount: amount}, ID: "m-" + id, Broker: "jetstream", Source: subject,
		Stream: "ORDERS", Offset: 7, DeliveryCount: 1}
}

// fromConsumer is the context of an adapter's deliveries: what it knows
// of its consumer, for every delivery's Origin.
func fromConsumer(template string) context.Context {
	return adapter.WithOrigin(context.Background(), func(o delivery.Origin) delivery.Origin {
		o.ServerAddress, o.ServerPort, o.ConsumerGroup, o.DestinationTemplate = "nats.internal", 4222, "billing-durable", template
		return o
	})
}

// TestServerAndGroupFromOrigin: the server the adapter reports
// (Origin.ServerAddress and ServerPort) is server.address and server.port
// on the span and the messaging.* metrics, and so is its consumer group,
// messaging.consumer.group.name, without Options.ConsumerGroup; with it,
// the option names the group. A delivery whose adapter reports neither
// has none of them.
func TestServerAndGroupFromOrigin(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, dedupotel.Options{Propagator: propagation.TraceContext{}})
	rcv := e.receiver(t, nil)
	d := adapter.Bind(rcv).Deliver(fromConsumer(""), jetStreamMsg("o-1", "orders", 1))
	d.Settled(adapter.Settlement{})
	d = adapter.Bind(rcv).Deliver(context.Background(), jetStreamMsg("o-2", "orders", 1))
	d.Settled(adapter.Settlement{})

	spans := e.ended("process orders")
	require.Len(t, spans, 2)
	a := attrs(spans[0].Attributes())
	require.Equal(t, "nats.internal", a["server.address"].AsString())
	require.Equal(t, int64(4222), a["server.port"].AsInt64())
	require.Equal(t, "billing-durable", a["messaging.consumer.group.name"].AsString())
	for _, k := range []attribute.Key{"server.address", "server.port", "messaging.consumer.group.name"} {
		require.NotContains(t, attrs(spans[1].Attributes()), k, "no adapter said: nothing to say")
	}

	rm := e.collect(t)
	server := []attribute.KeyValue{attribute.String("server.address", "nats.internal"), attribute.Int("server.port", 4222),
		attribute.String("messaging.consumer.group.name", "billing-durable"), attribute.String("messaging.system", "jetstream"),
		attribute.String("messaging.destination.name", "orders")}
	require.EqualValues(t, 1, sum(t, rm, dedupotel.MetricConsumedMessages, server...))
	require.EqualValues(t, 1, count(t, rm, dedupotel.MetricProcessDuration, server...))
	require.EqualValues(t, 2, sum(t, rm, dedupotel.MetricConsumedMessages))
	for _, set := range points(t, rm)[dedupotel.MetricConsumedMessages] {
		if _, ok := set.Value("server.address"); !ok {
			_, group := set.Value("messaging.consumer.group.name")
			require.False(t, group, "the delivery of no adapter has no group")
		}
	}

	// The option names the group of every delivery.
	named := newEnv(t)
	rcv = named.receiver(t, nil)
	d = adapter.Bind(rcv).Deliver(fromConsumer(""), jetStreamMsg("o-1", "orders", 1))
	d.Settled(adapter.Settlement{})
	require.Equal(t, "billing-workers", attrs(named.ended("process orders")[0].Attributes())["messaging.consumer.group.name"].AsString())
	require.EqualValues(t, 1, sum(t, named.collect(t), dedupotel.MetricConsumedMessages,
		attribute.String("messaging.consumer.group.name", "billing-workers"), attribute.String("server.address", "nats.internal")))
}

// TestDestinationTemplate: deliveries from subjects that carry an id
// (orders.<id>), whose adapter names them by a template (orders.*), get
// spans named after the template, each keeping its own subject as
// messaging.destination.name beside messaging.destination.template; the
// metrics carry the template and never the subject: their series do not
// grow with the messages. A template equal to the name (a literal
// subject) keeps the name on the metrics too.
func TestDestinationTemplate(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, dedupotel.Options{Propagator: propagation.TraceContext{}})
	rcv := e.receiver(t, nil)
	ctx := fromConsumer("orders.*")
	const n = 40
	for i := range n {
		amount := 1
		if i%4 == 0 {
			amount = 0 // a handler error: a failed delivery's series too
		}
		m := jetStreamMsg(fmt.Sprint("o-", i), fmt.Sprint("orders.", i), amount)
		d := adapter.Bind(rcv).Deliver(ctx, m)
		d.Settled(adapter.Settlement{})
		d = adapter.Bind(rcv).Deliver(ctx, m) // a redelivery: a duplicate, or the failure again
		d.Settled(adapter.Settlement{})
	}
	late := jetStreamMsg("late", "orders.late", 1) // returned unhandled at Stop
	adapter.Bind(rcv).Observe(ctx, delivery.Event{Origin: late.Origin(), Decision: delivery.Decision{Action: delivery.Retry, Reason: delivery.ReasonCanceled},
		Settled: true, Duration: time.Millisecond})

	spans := e.ended("process orders.*")
	require.Len(t, spans, 2*n+1, "every delivery's span is named after the template")
	seen := map[string]bool{}
	for _, s := range spans {
		a := attrs(s.Attributes())
		require.Equal(t, "orders.*", a["messaging.destination.template"].AsString())
		seen[a["messaging.destination.name"].AsString()] = true
	}
	require.Len(t, seen, n+1, "each span keeps its own subject")
	require.True(t, seen["orders.7"])

	rm := e.collect(t)
	tmpl := attribute.String("messaging.destination.template", "orders.*")
	require.EqualValues(t, 2*n+1, sum(t, rm, dedupotel.MetricDeliveries, tmpl))
	require.EqualValues(t, 2*n+1, sum(t, rm, dedupotel.MetricConsumedMessages, tmpl))
	require.EqualValues(t, 2*n+1, count(t, rm, dedupotel.MetricProcessDuration, tmpl))
	require.EqualValues(t, 0, sum(t, rm, dedupotel.MetricHandlersActive, tmpl))
	all := points(t, rm) // fails on a point naming a subject
	for name, sets := range all {
		for _, set := range sets {
			_, ok := set.Value("messaging.destination.name")
			require.False(t, ok, "%s names the destination by a subject: %v", name, set.ToSlice())
			v, ok := set.Value("messaging.destination.template")
			require.True(t, ok, "%s has no template: %v", name, set.ToSlice())
			require.Equal(t, "orders.*", v.AsString())
		}
		require.LessOrEqual(t, len(sets), 4, "%s has a series per message: %d for %d messages", name, len(sets), n)
	}
	require.Contains(t, all, dedupotel.MetricHandlersActive)

	// A literal subject is its own template: the metrics keep its name.
	d := adapter.Bind(rcv).Deliver(fromConsumer("refunds"), jetStreamMsg("r-1", "refunds", 1))
	d.Settled(adapter.Settlement{})
	require.Len(t, e.ended("process refunds"), 1)
	rm = e.collect(t)
	both := []attribute.KeyValue{attribute.String("messaging.destination.name", "refunds"),
		attribute.String("messaging.destination.template", "refunds")}
	require.EqualValues(t, 1, sum(t, rm, dedupotel.MetricDeliveries, both...))
	require.EqualValues(t, 1, sum(t, rm, dedupotel.MetricConsumedMessages, both...))
}

// TestNoTemplateKeepsTheName: without a template, the span is named after
// the destination and the metrics carry its name, as before.
func TestNoTemplateKeepsTheName(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, dedupotel.Options{Propagator: propagation.TraceContext{}})
	rcv := e.receiver(t, nil)
	d := adapter.Bind(rcv).Deliver(fromConsumer(""), jetStreamMsg("o-1", "orders", 1))
	d.Settled(adapter.Settlement{})
	spans := e.ended("process orders")
	require.Len(t, spans, 1)
	require.NotContains(t, attrs(spans[0].Attributes()), attribute.Key("messaging.destination.template"))
	rm := e.collect(t)
	for name, sets := range points(t, rm) {
		for _, set := range sets {
			v, ok := set.Value("messaging.destination.name")
			require.True(t, ok, name)
			require.Equal(t, "orders", v.AsString())
		}
	}
}
