package dedupotel_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	dedupotel "github.com/dedup-go/dedup/otel"
)

// TestDeliverySpan: a delivery through Deliver and Settled is one CONSUMER
// span "process orders", child of the caller's span, linked to the
// producer's span of the message's traceparent, with the messaging and
// dedup attributes and a settle event; the handler's span is its child.
func TestDeliverySpan(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rcv := e.receiver(t, nil)
	prod, h := producer(t)

	ctx, caller := e.tp.Tracer("caller").Start(context.Background(), "poll")
	d := adapter.Bind(rcv).Deliver(ctx, kafkaMsg("o-1", 10, h))
	require.NoError(t, d.Err)
	require.Equal(t, delivery.Ack, d.Decision.Action)
	require.Equal(t, trace.SpanFromContext(d.Context()).SpanContext().TraceID(), caller.SpanContext().TraceID())
	require.Empty(t, e.ended("process orders"), "the span ends when the delivery is settled")
	d.Settled(adapter.Settlement{Duration: 3 * time.Millisecond})
	caller.End()

	spans := e.ended("process orders")
	require.Len(t, spans, 1)
	s := spans[0]
	require.Equal(t, trace.SpanKindConsumer, s.SpanKind())
	require.Equal(t, caller.SpanContext().SpanID(), s.Parent().SpanID(), "parent: the ctx given to Deliver")
	require.Equal(t, caller.SpanContext().TraceID(), s.SpanContext().TraceID())
	require.Len(t, s.Links(), 1)
	require.Equal(t, prod.TraceID(), s.Links()[0].SpanContext.TraceID(), "link: the producer's span")
	require.Equal(t, prod.SpanID(), s.Links()[0].SpanContext.SpanID())
	require.Equal(t, codes.Unset, s.Status().Code)

	charge := e.ended("charge")
	require.Len(t, charge, 1)
	require.Equal(t, s.SpanContext().SpanID(), charge[0].Parent().SpanID(), "the handler's span nests under the delivery's")

	a := attrs(s.Attributes())
	for k, v := range map[attribute.Key]any{
		"messaging.system": "kafka", "messaging.operation.type": "process", "messaging.operation.name": "process",
		"messaging.destination.name": "orders", "messaging.consumer.group.name": "billing-workers",
		"messaging.destination.partition.id": "3", "messaging.kafka.offset": int64(42), "messaging.message.id": "m-o-1",
		"dedup.status": "processed", "dedup.decision": "ack", "dedup.reason": "processed", "dedup.attempt": int64(1),
		"dedup.namespace": "billing", "dedup.key": "billing:o-1", "dedup.stored": true,
	} {
		require.Contains(t, a, k)
		require.Equal(t, v, a[k].AsInterface(), "attribute %s", k)
	}
	require.NotContains(t, a, attribute.Key("error.type"))

	require.Len(t, s.Events(), 1)
	ev := s.Events()[0]
	require.Equal(t, "settle", ev.Name)
	ea := attrs(ev.Attributes)
	require.Equal(t, "settle", ea["messaging.operation.type"].AsString())
	require.Equal(t, "ack", ea["dedup.decision"].AsString())
	require.InDelta(t, 0.003, ea["dedup.settle.duration"].AsFloat64(), 1e-9)
	require.Equal(t, s.EndTime().Add(-3*time.Millisecond), ev.Time, "the event is at the settle's start")
}

// TestDeliverySpanStatus: a failed delivery's span has status Error and
// error.type, a duplicate's does not; a settle that failed is an error and
// is told in the settle event.
func TestDeliverySpanStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rcv := e.receiver(t, nil)
	ctx := context.Background()

	d := adapter.Bind(rcv).Deliver(ctx, kafkaMsg("fail", 0, nil))
	require.Error(t, d.Err)
	d.Settled(adapter.Settlement{})
	d = adapter.Bind(rcv).Deliver(ctx, kafkaMsg("ok", 1, nil))
	d.Settled(adapter.Settlement{})
	d = adapter.Bind(rcv).Deliver(ctx, kafkaMsg("ok", 1, nil))
	require.Equal(t, delivery.StatusDuplicate, d.Result.Status)
	d.Settled(adapter.Settlement{Err: errors.New("commit failed")})

	spans := e.ended("process orders")
	require.Len(t, spans, 3)
	failed, ok, dup := spans[0], spans[1], spans[2]
	require.Empty(t, failed.Parent().SpanID(), "no span in ctx: a root span")
	require.Empty(t, failed.Links(), "no traceparent: no link")
	require.Equal(t, codes.Error, failed.Status().Code)
	require.Contains(t, failed.Status().Description, "card service down")
	require.Equal(t, "handler-error", attrs(failed.Attributes())["error.type"].AsString())
	require.Equal(t, "retry", attrs(failed.Attributes())["dedup.decision"].AsString())

	require.Equal(t, codes.Unset, ok.Status().Code)
	require.Equal(t, "duplicate", attrs(dup.Attributes())["dedup.status"].AsString())
	require.Equal(t, codes.Error, dup.Status().Code, "the commit failed: the broker redelivers")
	require.Equal(t, "settle: commit failed", dup.Status().Description)
	require.NotContains(t, attrs(dup.Attributes()), attribute.Key("error.type"))
	require.Equal(t, "commit failed", attrs(dup.Events()[0].Attributes)["dedup.settle.error"].AsString())
}

// TestObserveNeverEndsAForeignSpan: a delivery StartDelivery never saw
// (one an adapter returned unhandled at Stop) gets a span of its own,
// started and ended in Observe; the caller's span in ctx is left open.
func TestObserveNeverEndsAForeignSpan(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rcv := e.receiver(t, nil)
	ctx, caller := e.tp.Tracer("caller").Start(context.Background(), "poll")
	m := kafkaMsg("late", 1, nil)
	adapter.Bind(rcv).Observe(ctx, delivery.Event{Origin: m.Origin(), Decision: delivery.Decision{Action: delivery.Retry, Reason: delivery.ReasonCanceled},
		Settled: true, Duration: time.Millisecond})
	require.Empty(t, e.ended("poll"), "the caller's span is not the Observer's to end")
	spans := e.ended("process orders")
	require.Len(t, spans, 1)
	require.Equal(t, caller.SpanContext().SpanID(), spans[0].Parent().SpanID())
	require.Equal(t, "canceled", attrs(spans[0].Attributes())["dedup.reason"].AsString())
	caller.End()
}

// TestServerSpanAnnotated: an HTTP or gRPC delivery starts no span: the
// server span in ctx gets the dedup attributes and stays open, and the
// handler's span nests under it.
func TestServerSpanAnnotated(t *testing.T) {
	t.Parallel()
	for _, broker := range []string{"http", "grpc"} {
		t.Run(broker, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			rcv := e.receiver(t, nil)
			n := 0
			req := func(id string) (trace.Span, adapter.Delivery[string]) {
				ctx, srv := e.tp.Tracer("otelhttp").Start(context.Background(), "POST /orders", trace.WithSpanKind(trace.SpanKindServer))
				m := &dedup.Message[order]{Body: order{ID: id, Amount: 1}, Broker: broker, Source: "POST /orders"}
				d := adapter.Bind(rcv).Deliver(ctx, m)
				d.Settled(adapter.Settlement{})
				require.Len(t, e.ended("POST /orders"), n, "the server span is the middleware's to end")
				srv.End()
				n++
				return srv, d
			}
			first, _ := req("o-1")
			again, d := req("o-1")
			require.Equal(t, delivery.StatusDuplicate, d.Result.Status)

			require.Len(t, e.spans.Ended(), 3, "two server spans and the first request's handler span, no delivery span")
			servers := e.ended("POST /orders")
			require.Equal(t, first.SpanContext().SpanID(), servers[0].SpanContext().SpanID())
			a := attrs(servers[0].Attributes())
			require.Equal(t, "processed", a["dedup.status"].AsString())
			require.False(t, a["dedup.replayed"].AsBool())
			require.Equal(t, "billing:o-1", a["dedup.key"].AsString())
			require.Equal(t, "billing", a["dedup.namespace"].AsString())
			b := attrs(servers[1].Attributes())
			require.Equal(t, again.SpanContext().SpanID(), servers[1].SpanContext().SpanID())
			require.True(t, b["dedup.replayed"].AsBool())
			require.Equal(t, "duplicate", b["dedup.status"].AsString())
			require.False(t, b["dedup.in_flight"].AsBool())
			require.Equal(t, codes.Unset, servers[1].Status().Code, "the middleware sets the server span's status")

			charge := e.ended("charge")
			require.Len(t, charge, 1)
			require.Equal(t, first.SpanContext().SpanID(), charge[0].Parent().SpanID())
		})
	}
}

// TestInject: Inject writes the context's span as a W3C traceparent, with
// the propagator given or, with nil Options, the default one.
func TestInject(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, span := e.tp.Tracer("t").Start(context.Background(), "dead-letter")
	defer span.End()
	sc := span.SpanContext()
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"

	for name, ob := range map[string]*dedupotel.Observer{"options": e.obs, "nil options": must(dedupotel.New(nil))} {
		got := map[string]string{}
		ob.Inject(ctx, func(k, v string) { got[k] = v })
		require.Equal(t, want, got["traceparent"], name)
	}
	// Through a receiver, as adapters call it.
	got := map[string]string{}
	adapter.Bind(e.receiver(t, nil)).Inject(ctx, func(k, v string) { got[k] = v })
	require.Equal(t, want, got["traceparent"])
	require.NotPanics(t, func() { e.obs.Inject(ctx, nil) })
}

func must(ob *dedupotel.Observer, err error) *dedupotel.Observer {
	if err != nil {
		panic(err)
	}
	return ob
}

// TestMetrics: a known workload through Deliver and Settled gives known
// counts, with bounded attributes only.
func TestMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var activeDuring int64
	sys, dest := attribute.String("messaging.system", "kafka"), attribute.String("messaging.destination.name", "orders")
	rcv := e.receiver(t, func(ctx context.Context) {
		if activeDuring == 0 {
			activeDuring = sum(t, e.collect(t), dedupotel.MetricHandlersActive, sys, dest)
		}
	})
	ctx := context.Background()
	deliver := func(m msg, s adapter.Settlement) adapter.Delivery[string] {
		d := adapter.Bind(rcv).Deliver(ctx, m)
		d.Settled(s)
		return d
	}
	deliver(kafkaMsg("a", 1, nil), adapter.Settlement{})                                              // processed
	deliver(kafkaMsg("a", 1, nil), adapter.Settlement{})                                              // duplicate
	deliver(kafkaMsg("b", 0, nil), adapter.Settlement{})                                              // failing: retried
	deliver(kafkaMsg("b", 0, nil), adapter.Settlement{})                                              // failing again
	deliver(kafkaMsg("c", -1, nil), adapter.Settlement{})                                             // dead letter, taken
	deliver(kafkaMsg("d", -1, nil), adapter.Settlement{Err: errors.New("dead letter not confirmed")}) // dead letter, failed
	deliver(kafkaMsg("e", 1, nil), adapter.Settlement{Err: errors.New("commit failed")})              // processed, ack failed
	rcv.Handle(ctx, kafkaMsg("a", 1, nil))                                                            // duplicate, unsettled
	rcv.Handle(ctx, kafkaMsg("f", -1, nil))                                                           // to dead-letter, unsettled: no dead letter

	rm := e.collect(t)
	ns := attribute.String("dedup.namespace", "billing")
	status := func(s string) attribute.KeyValue { return attribute.String("dedup.status", s) }
	reason := func(s string) attribute.KeyValue { return attribute.String("dedup.reason", s) }
	decision := func(s string) attribute.KeyValue { return attribute.String("dedup.decision", s) }

	require.EqualValues(t, 9, sum(t, rm, dedupotel.MetricDeliveries, ns, sys, dest))
	require.EqualValues(t, 2, sum(t, rm, dedupotel.MetricDeliveries, status("processed"), decision("ack"), reason("processed")))
	require.EqualValues(t, 2, sum(t, rm, dedupotel.MetricDeliveries, status("duplicate"), decision("ack"), reason("duplicate")))
	require.EqualValues(t, 2, sum(t, rm, dedupotel.MetricDeliveries, status("none"), decision("retry"), reason("handler-error")))
	require.EqualValues(t, 3, sum(t, rm, dedupotel.MetricDeliveries, status("none"), decision("dead-letter"), reason("permanent-error")))

	group := attribute.String("messaging.consumer.group.name", "billing-workers")
	op := attribute.String("messaging.operation.name", "process")
	require.EqualValues(t, 9, sum(t, rm, dedupotel.MetricConsumedMessages, sys, dest, group, op))
	require.EqualValues(t, 2, sum(t, rm, dedupotel.MetricConsumedMessages, attribute.String("error.type", "handler-error")))
	require.EqualValues(t, 3, sum(t, rm, dedupotel.MetricConsumedMessages, attribute.String("error.type", "permanent-error")))
	require.EqualValues(t, 9, count(t, rm, dedupotel.MetricProcessDuration, sys, dest, group, op))
	memstore := attribute.String("dedup.store", "memstore")
	require.EqualValues(t, 9, count(t, rm, dedupotel.MetricStoreDuration, ns, sys, dest, memstore, attribute.String("dedup.store.operation", "claim")),
		"every delivery the receiver handled claimed (a duplicate from memory in 0 s)")
	require.EqualValues(t, 2, count(t, rm, dedupotel.MetricStoreDuration, ns, sys, dest, memstore, attribute.String("dedup.store.operation", "complete")),
		"the successes completed")
	require.EqualValues(t, 7, count(t, rm, dedupotel.MetricHandlerDuration, ns, sys, dest), "the handler ran for all but the duplicates")

	require.EqualValues(t, 1, sum(t, rm, dedupotel.MetricDeadLetters, ns, sys, dest, reason("permanent-error")), "only the dead letter the broker took")
	require.EqualValues(t, 1, sum(t, rm, dedupotel.MetricDeadLetters))
	require.EqualValues(t, 1, sum(t, rm, dedupotel.MetricSettleFailures, ns, sys, dest, decision("dead-letter")))
	require.EqualValues(t, 1, sum(t, rm, dedupotel.MetricSettleFailures, decision("ack")))
	require.EqualValues(t, 0, sum(t, rm, dedupotel.MetricBypassed))
	require.EqualValues(t, 0, sum(t, rm, dedupotel.MetricLeasesLost))
	require.EqualValues(t, 0, sum(t, rm, dedupotel.MetricResultsNotStored))

	require.EqualValues(t, 1, activeDuring, "one delivery in its handler")
	require.EqualValues(t, 0, sum(t, rm, dedupotel.MetricHandlersActive, sys, dest), "none after")

	for _, name := range []string{dedupotel.MetricProcessDuration, dedupotel.MetricStoreDuration, dedupotel.MetricHandlerDuration} {
		m, ok := find(rm, name)
		require.True(t, ok, name)
		require.Equal(t, "s", m.Unit, name)
	}
	m, _ := find(rm, dedupotel.MetricConsumedMessages)
	require.Equal(t, "{message}", m.Unit)
	require.Equal(t, rcv.Stats().DeadLetters[delivery.ReasonPermanent], uint64(sum(t, rm, dedupotel.MetricDeadLetters)),
		"the metric agrees with the receiver's Stats")
}

// TestMetricsProblems: a bypassed delivery (store down, fail-open) and a
// success whose result could not be stored are counted.
func TestMetricsProblems(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	st := &downStore{}
	rcv, err := dedup.NewReceiver[msg, string](st, func(m msg) (string, error) { return m.Body.ID, nil },
		func(ctx context.Context, m msg) (string, error) { return strings.Repeat("x", 100), nil },
		&dedup.Config{Observer: e.obs, FailOpen: true, MaxResultSize: 10})
	require.NoError(t, err)
	ctx := context.Background()
	st.down = true
	d := adapter.Bind(rcv).Deliver(ctx, kafkaMsg("a", 1, nil))
	require.Equal(t, delivery.StatusBypassed, d.Result.Status)
	d.Settled(adapter.Settlement{})
	st.down = false
	d = adapter.Bind(rcv).Deliver(ctx, kafkaMsg("b", 1, nil))
	require.ErrorIs(t, d.Result.Problem, dedup.ErrResultNotStored)
	d.Settled(adapter.Settlement{})

	rm := e.collect(t)
	require.EqualValues(t, 1, sum(t, rm, dedupotel.MetricBypassed, attribute.String("messaging.system", "kafka")))
	require.EqualValues(t, 1, sum(t, rm, dedupotel.MetricResultsNotStored, attribute.String("messaging.system", "kafka")))
	require.Equal(t, "result-not-stored", attrs(e.ended("process orders")[1].Attributes())["dedup.reason"].AsString())
	require.Contains(t, attrs(e.ended("process orders")[1].Attributes()), attribute.Key("dedup.problem"))
}

// TestNoopProviders: over no-op providers the Observer does no work: the
// delivery's context is the caller's and nothing is allocated.
func TestNoopProviders(t *testing.T) {
	ob, err := dedupotel.New(&dedupotel.Options{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: metricnoop.NewMeterProvider()})
	require.NoError(t, err)
	ctx := context.Background()
	_, h := producer(t)
	m := kafkaMsg("a", 1, h)
	o := m.Origin()
	ev := delivery.Event{Origin: o, Status: delivery.StatusDuplicate, Decision: delivery.Decision{Action: delivery.Ack, Reason: delivery.ReasonDuplicate},
		Settled: true, Duration: time.Millisecond}
	require.Equal(t, ctx, ob.StartDelivery(ctx, o))
	if raceEnabled {
		t.Skip("allocations are not counted under the race detector")
	}
	allocs := testing.AllocsPerRun(100, func() {
		c := ob.StartDelivery(ctx, o)
		ob.Observe(c, ev)
	})
	require.Zero(t, allocs)
}
