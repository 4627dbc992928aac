// Command tracing prints the span tree that the dedupotel Observer records
// for a delivery on each broker: JetStream (the NATS server at $NATS_URL,
// default nats://127.0.0.1:4222), RabbitMQ ($AMQP_URL, default
// amqp://guest:guest@127.0.0.1:5672/) and Kafka (an in-process cluster,
// kfake, which speaks the real protocol).
//
// On each broker a producer span publishes an order and a poison message
// (a body that is not JSON), its trace context written into their headers
// (W3C traceparent): by dedupkafka.Writer's Injector on Kafka, by
// dedupamqp.Publisher's Injector on RabbitMQ, and with the propagator
// into the nats.Header on JetStream. A consumer whose dedup.Receiver has
// the dedupotel Observer takes them: each delivery is a CONSUMER span
// "process <destination>", linked to the producer's span (not its child),
// with the handler's span under it and a "settle" event telling what the
// adapter did. The poison is dead-lettered, and its dead letter carries
// the trace context of the poison's delivery. The spans go to the
// OpenTelemetry SDK's in-memory exporter and are printed as trees. The
// streams and queues are made under random names and deleted at the end.
//
//	go -C examples/tracing run .
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/dedup-go/dedup"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/idstrategy"
	dedupotel "github.com/dedup-go/dedup/otel"
	"github.com/dedup-go/dedup/store/memstore"
)

// Order is the message the producer publishes.
type Order struct {
	ID    string `json:"id"`
	Cents int    `json:"cents"`
}

// Receipt is the handler's result.
type Receipt struct {
	OrderID string `json:"order_id"`
	Charged int    `json:"charged"`
}

// poison is a body that does not decode as an Order: it is dead-lettered.
var poison = []byte("not json")

// waitFor bounds each wait of a run: for the deliveries, for the dead
// letter, for the consumer to stop.
const waitFor = 30 * time.Second

// The in-process Kafka cluster's topics and the consumer group.
const (
	kafkaTopic = "orders"
	kafkaDLQ   = "orders.dlq"
	kafkaGroup = "billing"
)

// Capture is what a run on one broker recorded.
type Capture struct {
	// System is the broker's messaging.system: jetstream, rabbitmq, kafka.
	System string
	// Destination is the subject, queue or topic the orders went to.
	Destination string
	// Producer is the span the two messages were published under.
	Producer trace.SpanContext
	// Spans are every span that ended, in the order they ended.
	Spans tracetest.SpanStubs
	// DeadLetter holds the traceparent header values of the poison's
	// dead letter.
	DeadLetter []string
	// Stats are the consumer's, once stopped.
	Stats dedup.ConsumerStats
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	err := run(ctx, os.Stdout, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracing example:", err)
		os.Exit(1)
	}
}

// run traces a delivery on each broker and prints each tree to w; the
// adapters and receivers log to log.
func run(ctx context.Context, w io.Writer, log *slog.Logger) error {
	natsURL := cmp.Or(os.Getenv("NATS_URL"), natsgo.DefaultURL)
	amqpURL := cmp.Or(os.Getenv("AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/")
	runs := []struct {
		name string
		run  func(context.Context) (*Capture, error)
	}{
		{"jetstream", func(ctx context.Context) (*Capture, error) { return traceJetStream(ctx, natsURL, log) }},
		{"rabbitmq", func(ctx context.Context) (*Capture, error) { return traceRabbitMQ(ctx, amqpURL, log) }},
		{"kafka", func(ctx context.Context) (*Capture, error) {
			cluster, err := startKafka()
			if err != nil {
				return nil, err
			}
			defer cluster.Close()
			return traceKafka(ctx, cluster.ListenAddrs(), log)
		}},
	}
	var errs []error
	for i, r := range runs {
		c, err := r.run(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.name, err))
			continue
		}
		if i > 0 {
			fmt.Fprintln(w)
		}
		Print(w, c)
	}
	return errors.Join(errs...)
}

// tracing is the OpenTelemetry of one run: an SDK TracerProvider that
// exports every span, synchronously, to memory; the tracer of the producer
// and the handler; the propagator; and the dedupotel Observer made with
// them.
type tracing struct {
	exp    *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	obs    *dedupotel.Observer
}

// newTracing sets up the tracing of a run; group is the consumer group
// (messaging.consumer.group.name), "" for none.
func newTracing(group string) (*tracing, error) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prop := propagation.TraceContext{}
	obs, err := dedupotel.New(&dedupotel.Options{
		TracerProvider: tp,
		MeterProvider:  metricnoop.NewMeterProvider(),
		Propagator:     prop,
		ConsumerGroup:  group,
	})
	if err != nil {
		return nil, err
	}
	return &tracing{exp: exp, tp: tp, tracer: tp.Tracer("github.com/dedup-go/dedup/examples/tracing"), prop: prop, obs: obs}, nil
}

// shutdown ends the TracerProvider.
func (t *tracing) shutdown(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = t.tp.Shutdown(ctx)
}

// receiver returns a Receiver over memstore, keyed by the order's id, whose
// Observer is the run's; its handler charges each order under a span of
// its own, started from the handler's context (the delivery's span).
func (t *tracing) receiver(log *slog.Logger) (*dedup.Receiver[*dedup.Message[Order], Receipt], error) {
	store, err := memstore.New(nil)
	if err != nil {
		return nil, err
	}
	charge := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		ctx, span := t.tracer.Start(ctx, "charge "+m.Body.ID, trace.WithAttributes(attribute.Int("order.cents", m.Body.Cents)))
		defer span.End()
		if err := ctx.Err(); err != nil {
			span.SetStatus(codes.Error, err.Error())
			return Receipt{}, err
		}
		return Receipt{OrderID: m.Body.ID, Charged: m.Body.Cents}, nil
	}
	return dedup.NewReceiver(store, idstrategy.BodyField("id", func(o Order) string { return o.ID }), charge,
		&dedup.Config{
			Namespace: "billing", Observer: t.obs, Logger: log,
			// As long as the Kafka topic keeps messages (a week), else the
			// Kafka consumer warns at Start that a redelivery may come after
			// the key is forgotten.
			Retention: 7 * 24 * time.Hour,
		})
}

// produce publishes under a PRODUCER span "send <destination>" and
// returns the span's context.
func (t *tracing) produce(ctx context.Context, system, destination string, publish func(context.Context) error) (trace.SpanContext, error) {
	ctx, span := t.tracer.Start(ctx, "send "+destination, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		attribute.String("messaging.system", system),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.destination.name", destination),
	))
	defer span.End()
	if err := publish(ctx); err != nil {
		span.SetStatus(codes.Error, err.Error())
		return span.SpanContext(), fmt.Errorf("publish: %w", err)
	}
	return span.SpanContext(), nil
}

// awaitDeliveries waits until n delivery (CONSUMER) spans have ended: the
// Observer ends a delivery's span once the adapter settled it.
func (t *tracing) awaitDeliveries(ctx context.Context, n int) error {
	return poll(ctx, fmt.Sprintf("%d delivery spans", n), func(context.Context) (bool, error) {
		return len(deliveries(t.exp.GetSpans())) >= n, nil
	})
}

// messages are the bodies a run publishes: an order, then the poison.
func messages() [][]byte {
	order, _ := json.Marshal(Order{ID: "o-1", Cents: 1250}) // an Order always encodes
	return [][]byte{order, poison}
}

// natsCarrier writes and reads a nats.Header for a propagator. NATS header
// names are case-sensitive: the names are kept as the propagator gives
// them (traceparent), as the adapter reads them.
type natsCarrier natsgo.Header

func (c natsCarrier) Get(key string) string { return natsgo.Header(c).Get(key) }
func (c natsCarrier) Set(key, value string) { natsgo.Header(c).Set(key, value) }
func (c natsCarrier) Keys() []string        { return slices.Sorted(maps.Keys(c)) }

// traceJetStream publishes an order and a poison message to a fresh stream
// on the NATS server at url, consumes them with a dedupnats.Consumer and
// returns what was traced.
func traceJetStream(ctx context.Context, url string, log *slog.Logger) (*Capture, error) {
	nc, err := natsgo.Connect(url, natsgo.MaxReconnects(0), natsgo.Timeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	id := suffix()
	stream, subject := "DEDUPEX_TRACING_"+strings.ToUpper(id), "dedupex.tracing."+id+".orders"
	dlqStream, dlq := stream+"_DLQ", "dedupex.tracing."+id+".dlq"
	durable := "billing_" + id
	for name, subj := range map[string]string{stream: subject, dlqStream: dlq} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subj}, Storage: jetstream.MemoryStorage}); err != nil {
			return nil, err
		}
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if derr := js.DeleteStream(dctx, name); derr != nil {
				log.WarnContext(dctx, "delete stream", slog.String("stream", name), slog.Any("error", derr))
			}
		}()
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 5,
	})
	if err != nil {
		return nil, err
	}
	tr, err := newTracing(durable)
	if err != nil {
		return nil, err
	}
	defer tr.shutdown(ctx)
	rcv, err := tr.receiver(log)
	if err != nil {
		return nil, err
	}
	c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DeadLetterSubject: dlq, Logger: log})
	if err != nil {
		return nil, err
	}

	// The producer writes its span's trace context into each message's
	// headers with the propagator.
	producer, err := tr.produce(ctx, dedupnats.BrokerJetStream, subject, func(ctx context.Context) error {
		for _, data := range messages() {
			m := natsgo.NewMsg(subject)
			m.Data = data
			tr.prop.Inject(ctx, natsCarrier(m.Header))
			if _, err := js.PublishMsg(ctx, m); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}

	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	var dead []string
	werr := tr.awaitDeliveries(ctx, 2)
	if werr == nil {
		werr = poll(ctx, "the dead letter", func(ctx context.Context) (bool, error) {
			s, err := js.Stream(ctx, dlqStream)
			if err != nil {
				return false, err
			}
			m, err := s.GetLastMsgForSubject(ctx, dlq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			dead = m.Header.Values("traceparent")
			return true, nil
		})
	}
	if err := errors.Join(werr, stop(ctx, c.Stop)); err != nil {
		return nil, err
	}
	return &Capture{
		System: dedupnats.BrokerJetStream, Destination: subject, Producer: producer,
		Spans: tr.exp.GetSpans(), DeadLetter: dead, Stats: c.Stats(),
	}, nil
}

// traceRabbitMQ publishes an order and a poison message to a fresh queue
// (with its dead-letter exchange and queue) on the broker at url,
// consumes them with a dedupamqp.Consumer and returns what was traced.
func traceRabbitMQ(ctx context.Context, url string, log *slog.Logger) (*Capture, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	queue := "dedupex.tracing." + suffix() + ".orders"
	top := dedupamqp.Topology{Queue: queue, DeadLetterExchange: queue + ".dlx", DeadLetterQueue: queue + ".dlq"}
	if err := top.Declare(ctx, ch); err != nil {
		return nil, err
	}
	defer func() {
		for _, q := range []string{top.Queue, top.DeadLetterQueue} {
			if _, err := ch.QueueDelete(q, false, false, false); err != nil {
				log.WarnContext(ctx, "delete queue", slog.String("queue", q), slog.Any("error", err))
			}
		}
		if err := ch.ExchangeDelete(top.DeadLetterExchange, false, false); err != nil {
			log.WarnContext(ctx, "delete exchange", slog.String("exchange", top.DeadLetterExchange), slog.Any("error", err))
		}
	}()
	tr, err := newTracing("")
	if err != nil {
		return nil, err
	}
	defer tr.shutdown(ctx)
	rcv, err := tr.receiver(log)
	if err != nil {
		return nil, err
	}
	opts := top.Options()
	opts.Logger = log
	c, err := dedupamqp.NewConsumer(url, top.Queue, rcv, opts)
	if err != nil {
		return nil, err
	}

	// The Publisher's Injector (the Observer) writes the trace context of
	// Publish's ctx into each message's headers.
	pub, err := dedupamqp.NewPublisher(conn, &dedupamqp.PublisherOptions{Injector: tr.obs})
	if err != nil {
		return nil, err
	}
	defer pub.Close(ctx)
	producer, err := tr.produce(ctx, dedupamqp.BrokerRabbitMQ, top.Queue, func(ctx context.Context) error {
		for _, data := range messages() {
			if _, err := pub.Publish(ctx, "", top.Queue, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: data}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}

	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	var dead []string
	werr := tr.awaitDeliveries(ctx, 2)
	if werr == nil {
		werr = poll(ctx, "the dead letter", func(context.Context) (bool, error) {
			d, ok, err := ch.Get(top.DeadLetterQueue, true)
			if err != nil || !ok {
				return false, err
			}
			if v, ok := d.Headers["traceparent"].(string); ok {
				dead = append(dead, v)
			}
			return true, nil
		})
	}
	if err := errors.Join(werr, stop(ctx, c.Stop)); err != nil {
		return nil, err
	}
	return &Capture{
		System: dedupamqp.BrokerRabbitMQ, Destination: top.Queue, Producer: producer,
		Spans: tr.exp.GetSpans(), DeadLetter: dead, Stats: c.Stats(),
	}, nil
}

// startKafka starts an in-process Kafka cluster with the topics of the
// Kafka run. Its group session timeout may be as short as 500ms, so that
// the consumer joins its group quickly. Close it when done.
func startKafka() (*kfake.Cluster, error) {
	return kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, kafkaTopic, kafkaDLQ),
		kfake.GroupMinSessionTimeout(500*time.Millisecond))
}

// traceKafka writes an order and a poison message to the topic
// kafkaTopic of the cluster at brokers (which has kafkaDLQ too), consumes
// them with a dedupkafka.Consumer and returns what was traced.
func traceKafka(ctx context.Context, brokers []string, log *slog.Logger) (*Capture, error) {
	tr, err := newTracing(kafkaGroup)
	if err != nil {
		return nil, err
	}
	defer tr.shutdown(ctx)
	rcv, err := tr.receiver(log)
	if err != nil {
		return nil, err
	}
	reader := kafka.NewReader(kafka.ReaderConfig{
		Brokers: brokers, GroupID: kafkaGroup, Topic: kafkaTopic, StartOffset: kafka.FirstOffset,
		MaxWait: 50 * time.Millisecond, SessionTimeout: time.Second, HeartbeatInterval: 100 * time.Millisecond,
		RebalanceTimeout: 2 * time.Second, JoinGroupBackoff: 100 * time.Millisecond,
		ReadBackoffMin: 10 * time.Millisecond, ReadBackoffMax: 100 * time.Millisecond,
	})
	defer reader.Close() // after Stop: the Consumer never closes its reader
	c, err := dedupkafka.NewConsumer(reader, rcv, &dedupkafka.Options{
		DeadLetterTopic: kafkaDLQ, CommitInterval: 10 * time.Millisecond, Logger: log,
	})
	if err != nil {
		return nil, err
	}

	// The Writer's Injector (the Observer) writes the trace context of
	// WriteMessages's ctx into each message's headers.
	transport := &kafka.Transport{}
	defer transport.CloseIdleConnections()
	w := &dedupkafka.Writer{
		W: &kafka.Writer{
			Addr: kafka.TCP(brokers...), Topic: kafkaTopic, RequiredAcks: kafka.RequireAll,
			BatchTimeout: time.Millisecond, Transport: transport,
		},
		Injector: tr.obs,
	}
	defer w.W.Close()
	producer, err := tr.produce(ctx, dedupkafka.BrokerKafka, kafkaTopic, func(ctx context.Context) error {
		var msgs []kafka.Message
		for _, data := range messages() {
			msgs = append(msgs, kafka.Message{Value: data})
		}
		return w.WriteMessages(ctx, msgs...)
	})
	if err != nil {
		return nil, err
	}

	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	var dead []string
	werr := tr.awaitDeliveries(ctx, 2)
	if werr == nil {
		dead, werr = kafkaDeadLetter(ctx, brokers)
	}
	if err := errors.Join(werr, stop(ctx, c.Stop)); err != nil {
		return nil, err
	}
	return &Capture{
		System: dedupkafka.BrokerKafka, Destination: kafkaTopic, Producer: producer,
		Spans: tr.exp.GetSpans(), DeadLetter: dead, Stats: c.Stats(),
	}, nil
}

// kafkaDeadLetter reads the first message of kafkaDLQ and returns its
// traceparent header values.
func kafkaDeadLetter(ctx context.Context, brokers []string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: kafkaDLQ, MaxWait: 50 * time.Millisecond})
	defer r.Close()
	m, err := r.ReadMessage(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the dead letter: %w", err)
	}
	var out []string
	for k, v := range dedupkafka.Header(m.Headers).All() {
		if k == "traceparent" {
			out = append(out, v)
		}
	}
	return out, nil
}

// stop stops a consumer within waitFor.
func stop(ctx context.Context, stop func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), waitFor)
	defer cancel()
	if err := stop(ctx); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	return nil
}

// poll calls cond every 20ms until it holds, fails, or waitFor passes.
func poll(ctx context.Context, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond(ctx)
		switch {
		case err != nil:
			return fmt.Errorf("waiting for %s: %w", what, err)
		case ok:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// suffix is a random name part, so that runs on a shared server never
// meet.
func suffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b)
}

// deliveries returns the CONSUMER spans among spans: one per delivery.
func deliveries(spans tracetest.SpanStubs) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range spans {
		if s.SpanKind == trace.SpanKindConsumer {
			out = append(out, s)
		}
	}
	return out
}

// Print writes the spans of c as trees: the producer's span, then each
// delivery's span with its link to the producer, its attributes, the
// handler's spans and the settle event under it, then the traceparent of
// the dead letter and the span it names.
func Print(w io.Writer, c *Capture) {
	fmt.Fprintf(w, "%s: %s\n", c.System, c.Destination)
	known := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range c.Spans {
		known[s.SpanContext.SpanID()] = s
	}
	children := map[trace.SpanID]tracetest.SpanStubs{}
	var roots tracetest.SpanStubs
	for _, s := range c.Spans {
		if _, ok := known[s.Parent.SpanID()]; ok && s.Parent.IsValid() {
			children[s.Parent.SpanID()] = append(children[s.Parent.SpanID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	byStart := func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) }
	slices.SortStableFunc(roots, byStart)
	for _, r := range roots {
		fmt.Fprintf(w, "%s\n", spanLine(r))
		printBelow(w, "", r, known, children)
	}
	for _, tp := range c.DeadLetter {
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp}))
		named := "no span of this run"
		if s, ok := known[sc.SpanID()]; ok && sc.TraceID() == s.SpanContext.TraceID() {
			named = fmt.Sprintf("%s (%s)", s.Name, reasonOf(s))
		}
		fmt.Fprintf(w, "dead letter: traceparent %s → %s\n", tp, named)
	}
}

// printBelow writes what is under s: its links and chosen attributes, then
// its child spans and events in the order they happened.
func printBelow(w io.Writer, prefix string, s tracetest.SpanStub, known map[trace.SpanID]tracetest.SpanStub, children map[trace.SpanID]tracetest.SpanStubs) {
	type item struct {
		at    time.Time
		line  string
		child *tracetest.SpanStub
	}
	var items []item
	for _, ch := range children[s.SpanContext.SpanID()] {
		items = append(items, item{at: ch.StartTime, line: spanLine(ch), child: &ch})
	}
	for _, ev := range s.Events {
		items = append(items, item{at: ev.Time, line: "event " + ev.Name + " " + attrs(ev.Attributes, "dedup.decision", "dedup.reason")})
	}
	slices.SortStableFunc(items, func(a, b item) int { return a.at.Compare(b.at) })
	bar := "  "
	if len(items) > 0 {
		bar = "│ "
	}
	for _, l := range s.Links {
		to := "a span of another run"
		if p, ok := known[l.SpanContext.SpanID()]; ok && p.SpanContext.TraceID() == l.SpanContext.TraceID() {
			to = p.Name
		}
		fmt.Fprintf(w, "%s%s  link → trace %s span %s (%s)\n", prefix, bar, l.SpanContext.TraceID(), l.SpanContext.SpanID(), to)
	}
	if s.SpanKind == trace.SpanKindConsumer {
		fmt.Fprintf(w, "%s%s  %s\n", prefix, bar, attrs(s.Attributes, "messaging.system", "messaging.destination.name",
			"messaging.consumer.group.name", "messaging.destination.partition.id", "messaging.kafka.offset"))
		fmt.Fprintf(w, "%s%s  %s\n", prefix, bar, attrs(s.Attributes, "dedup.status", "dedup.decision", "dedup.reason", "dedup.attempt"))
	}
	for i, it := range items {
		branch, next := "├─ ", "│  "
		if i == len(items)-1 {
			branch, next = "└─ ", "   "
		}
		fmt.Fprintf(w, "%s%s%s\n", prefix, branch, it.line)
		if it.child != nil {
			printBelow(w, prefix+next, *it.child, known, children)
		}
	}
}

// spanLine is a span's name, kind, trace and span ids.
func spanLine(s tracetest.SpanStub) string {
	return fmt.Sprintf("%s [%s] trace %s span %s", s.Name, s.SpanKind, s.SpanContext.TraceID(), s.SpanContext.SpanID())
}

// attrs writes the attributes of kvs named by keys, in that order, as
// key=value.
func attrs(kvs []attribute.KeyValue, keys ...string) string {
	var b strings.Builder
	for _, k := range keys {
		for _, kv := range kvs {
			if string(kv.Key) == k {
				if b.Len() > 0 {
					b.WriteByte(' ')
				}
				fmt.Fprintf(&b, "%s=%s", k, kv.Value.String())
				break
			}
		}
	}
	return b.String()
}

// reasonOf is a delivery span's dedup.reason.
func reasonOf(s tracetest.SpanStub) string {
	for _, kv := range s.Attributes {
		if kv.Key == "dedup.reason" {
			return "dedup.reason=" + kv.Value.String()
		}
	}
	return "no dedup.reason"
}
