package main

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/dedup-go/dedup/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// quiet discards the adapters' and receivers' logs.
var quiet = slog.New(slog.DiscardHandler)

// TestJetStreamSpanTree: on a fresh stream of the shared NATS server, the
// producer's trace context set with the propagator on the nats.Header
// links each delivery's span to the producer's, and the poison's dead
// letter names the poison's delivery span.
func TestJetStreamSpanTree(t *testing.T) {
	t.Parallel()
	url := testenv.NATS.Addr(t)
	c, err := traceJetStream(runContext(t), url, quiet)
	require.NoError(t, err)
	checkTree(t, c, "jetstream")
}

// TestRabbitMQSpanTree: on a fresh queue with its dead-letter exchange,
// the producer's trace context written by dedupamqp.Publisher's Injector
// links each delivery's span to the producer's, and the poison's dead
// letter names the poison's delivery span.
func TestRabbitMQSpanTree(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	c, err := traceRabbitMQ(runContext(t), url, quiet)
	require.NoError(t, err)
	checkTree(t, c, "rabbitmq")
}

// TestKafkaSpanTree: on an in-process cluster (kfake), the producer's
// trace context written by dedupkafka.Writer's Injector links each
// delivery's span to the producer's, and the poison's dead letter names
// the poison's delivery span.
func TestKafkaSpanTree(t *testing.T) {
	t.Parallel()
	cluster, err := startKafka()
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	c, err := traceKafka(runContext(t), cluster.ListenAddrs(), quiet)
	require.NoError(t, err)
	checkTree(t, c, "kafka")
}

// runContext bounds a run: each of its waits is bounded too, this is the
// backstop.
func runContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// checkTree checks the spans of a run: the producer's span; one CONSUMER
// span per delivery, "process <destination>", linked to the producer's
// span and not its child, with the broker's attributes, the dedup ones and
// the settle event; the handler's span a child of the order's delivery
// span; the poison's dead letter carrying the poison's delivery span. And
// that Print shows it.
func checkTree(t *testing.T, c *Capture, system string) {
	t.Helper()
	require.Equal(t, system, c.System)
	require.True(t, c.Producer.IsValid(), "no producer span")

	dels := deliveries(c.Spans)
	require.Len(t, dels, 2, "one CONSUMER span per delivery")
	require.EqualValues(t, len(dels), c.Stats.Delivered, "as many delivery spans as deliveries")
	byReason := map[string]tracetest.SpanStub{}
	for _, d := range dels {
		a := attrMap(d.Attributes)
		require.Equal(t, "process "+c.Destination, d.Name)
		require.Equal(t, system, a["messaging.system"])
		require.Equal(t, c.Destination, a["messaging.destination.name"])
		require.Equal(t, "process", a["messaging.operation.type"])
		// What the adapter knows of the delivery reaches the span: the
		// server it came from, and the consumer group where the broker
		// has one (RabbitMQ has none in the conventions).
		require.NotEmpty(t, a["server.address"], "server.address on %s", d.Name)
		require.NotContains(t, []string{"", "0"}, a["server.port"], "server.port on %s", d.Name)
		if system != "rabbitmq" {
			require.NotEmpty(t, a["messaging.consumer.group.name"], "messaging.consumer.group.name on %s", d.Name)
		}
		for _, k := range []string{"dedup.status", "dedup.decision", "dedup.reason"} {
			require.Contains(t, a, k, "%s missing on %s", k, d.Name)
		}

		require.Truef(t, linksTo(d, c.Producer), "the delivery (%s) is not linked to the producer's span %s: links %v",
			a["dedup.reason"], c.Producer.SpanID(), d.Links)
		require.NotEqual(t, c.Producer.SpanID(), d.Parent.SpanID(), "the producer's span is the delivery's parent: a link, not a parent")
		require.NotEqual(t, c.Producer.TraceID(), d.SpanContext.TraceID(), "the delivery is in the producer's trace")

		settle := eventNamed(d, "settle")
		require.NotNil(t, settle, "no settle event on the delivery (%s)", a["dedup.reason"])
		ea := attrMap(settle.Attributes)
		require.Equal(t, a["dedup.decision"], ea["dedup.decision"])
		require.Equal(t, a["dedup.reason"], ea["dedup.reason"])
		require.Equal(t, "settle", ea["messaging.operation.type"])

		require.NotContains(t, byReason, a["dedup.reason"])
		byReason[a["dedup.reason"]] = d
	}

	order, ok := byReason["processed"]
	require.True(t, ok, "no processed delivery: %v", byReason)
	require.Equal(t, map[string]string{"dedup.status": "processed", "dedup.decision": "ack", "dedup.reason": "processed"},
		pick(order.Attributes, "dedup.status", "dedup.decision", "dedup.reason"))
	bad, ok := byReason["undecodable"]
	require.True(t, ok, "no poison delivery: %v", byReason)
	require.Equal(t, map[string]string{"dedup.status": "none", "dedup.decision": "dead-letter", "dedup.reason": "undecodable"},
		pick(bad.Attributes, "dedup.status", "dedup.decision", "dedup.reason"))

	var handler []tracetest.SpanStub
	for _, s := range c.Spans {
		if s.Name == "charge o-1" {
			handler = append(handler, s)
		}
	}
	require.Len(t, handler, 1, "the handler ran once, for the order")
	require.Equal(t, order.SpanContext.TraceID(), handler[0].SpanContext.TraceID(), "the handler's span is in another trace than its delivery's")
	require.Equal(t, order.SpanContext.SpanID(), handler[0].Parent.SpanID(), "the handler's span is not a child of its delivery's span")
	require.Len(t, c.Spans, 4, "the producer's, two deliveries', the handler's")

	require.Len(t, c.DeadLetter, 1, "the dead letter carries one traceparent")
	dl := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": c.DeadLetter[0]}))
	require.True(t, dl.IsValid(), "the dead letter's traceparent %q does not parse", c.DeadLetter[0])
	require.Equal(t, bad.SpanContext.TraceID(), dl.TraceID(), "the dead letter's traceparent is not the poison delivery's trace")
	require.Equal(t, bad.SpanContext.SpanID(), dl.SpanID(), "the dead letter's traceparent does not name the poison delivery's span")

	var out bytes.Buffer
	Print(&out, c)
	t.Logf("%s", out.String())
	printed := out.String()
	require.Contains(t, printed, "send "+c.Destination+" [producer]")
	require.Contains(t, printed, "process "+c.Destination+" [consumer] trace "+order.SpanContext.TraceID().String())
	require.Contains(t, printed, "├─ charge o-1 [internal]")
	require.Contains(t, printed, "link → trace "+c.Producer.TraceID().String()+" span "+c.Producer.SpanID().String())
	require.Contains(t, printed, "└─ event settle dedup.decision=dead-letter dedup.reason=undecodable")
	require.Contains(t, printed, "dead letter: traceparent "+c.DeadLetter[0]+" → process "+c.Destination+" (dedup.reason=undecodable)")
}

// linksTo reports whether s has a link to sc.
func linksTo(s tracetest.SpanStub, sc trace.SpanContext) bool {
	for _, l := range s.Links {
		if l.SpanContext.TraceID() == sc.TraceID() && l.SpanContext.SpanID() == sc.SpanID() {
			return true
		}
	}
	return false
}

// eventNamed returns s's event of that name, nil for none.
func eventNamed(s tracetest.SpanStub, name string) *sdktrace.Event {
	for i := range s.Events {
		if s.Events[i].Name == name {
			return &s.Events[i]
		}
	}
	return nil
}

// attrMap is kvs as strings by key.
func attrMap(kvs []attribute.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		out[string(kv.Key)] = kv.Value.String()
	}
	return out
}

// pick is the attributes of kvs named by keys.
func pick(kvs []attribute.KeyValue, keys ...string) map[string]string {
	all := attrMap(kvs)
	out := map[string]string{}
	for _, k := range keys {
		if v, ok := all[k]; ok {
			out[k] = v
		}
	}
	return out
}
