// Command observability runs a JetStream consumer through dedup with the
// OpenTelemetry observer (dedupotel): its metrics are served for Prometheus
// on /metrics, its spans written as JSON to standard output.
//
//	go -C examples/observability run . -workload
//
// It consumes the stream -stream (created if missing, with a stream of its
// own for the dead letters) of the NATS server at -nats ($NATS_URL, default
// nats://127.0.0.1:4222), and serves the metrics on -metrics (default
// 127.0.0.1:9464) until it gets SIGINT or SIGTERM, or until the consumer
// stops on its own (its consumer deleted, the connection closed): it then
// exits with status 1, so that Prometheus sees its target go down. With
// -workload it first publishes a known workload (see [Workload]).
//
// See README.md for what /metrics shows and the Prometheus rules.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/idstrategy"
	dedupotel "github.com/dedup-go/dedup/otel"
	"github.com/dedup-go/dedup/store/memstore"
)

// Order is the message the producers publish. FailOnce makes the handler
// fail its first run for the order, as a transient error would.
type Order struct {
	ID       string `json:"id"`
	Cents    int    `json:"cents"`
	FailOnce bool   `json:"fail_once,omitempty"`
}

// Config is what the service runs with.
type Config struct {
	// NATSURL is the NATS server's address.
	NATSURL string
	// Stream is the JetStream stream consumed; it captures Stream.orders
	// (lower case), its dead letters go to Stream.dlq, captured by the
	// stream Stream_DLQ. Both are created when missing.
	Stream string
	// MetricsAddr is where /metrics is served; port 0 picks a free one.
	MetricsAddr string
	// Traces receives the spans as JSON lines; nil drops them.
	Traces io.Writer
	// Backoff is the delay before a failed handler's retry. Defaults to
	// the receiver's default (1s, doubling).
	Backoff dedup.Backoff
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func main() {
	var cfg Config
	var workload bool
	var traces string
	flag.StringVar(&cfg.NATSURL, "nats", cmp.Or(os.Getenv("NATS_URL"), natsgo.DefaultURL), "NATS server (JetStream enabled); $NATS_URL")
	flag.StringVar(&cfg.Stream, "stream", "DEDUP_OBSERVABILITY", "the JetStream stream to consume (created if missing)")
	flag.StringVar(&cfg.MetricsAddr, "metrics", cmp.Or(os.Getenv("METRICS_ADDR"), "127.0.0.1:9464"), "address of the /metrics endpoint; $METRICS_ADDR")
	flag.StringVar(&traces, "traces", "stdout", "where spans go: stdout, or off")
	flag.BoolVar(&workload, "workload", false, "publish the known workload (200 messages) once started")
	flag.Parse()
	switch traces {
	case "stdout":
		cfg.Traces = os.Stdout
	case "off":
	default:
		fmt.Fprintf(os.Stderr, "observability: -traces is %q: want stdout or off\n", traces)
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, cfg, workload); err != nil {
		slog.Error("observability example", "err", err)
		os.Exit(1)
	}
}

// run starts the service, publishes the workload if asked, and serves until
// ctx ends (nil error) or the consumer stops on its own (its error).
func run(ctx context.Context, cfg Config, workload bool) (err error) {
	svc, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		// Shutdown gets a context of its own: ctx has ended by now.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		err = errors.Join(err, svc.Shutdown(sctx))
	}()
	svc.logger.InfoContext(ctx, "serving metrics", "url", "http://"+svc.MetricsAddr()+"/metrics", "stream", cfg.Stream)
	if workload {
		w, err := PublishWorkload(ctx, svc.js, svc.Subject())
		if err != nil {
			return err
		}
		svc.logger.InfoContext(ctx, "workload published", "messages", w.Messages, "unique", w.Unique,
			"duplicates", w.Duplicates, "poison", w.Poison, "fail_once", w.FailOnce)
	}
	select {
	case <-ctx.Done():
		return nil
	case <-svc.Stopped():
		return fmt.Errorf("the consumer stopped unasked: %w", svc.consumer.Err())
	}
}

// Service is the running example: a JetStream consumer whose receiver
// reports to dedupotel, and the HTTP server of its metrics.
type Service struct {
	logger   *slog.Logger
	nc       *natsgo.Conn
	js       jetstream.JetStream
	subject  string
	consumer *dedupnats.Consumer[Order, string]
	mp       *sdkmetric.MeterProvider
	tp       *sdktrace.TracerProvider
	srv      *http.Server
	addr     string
	served   chan error

	mu     sync.Mutex
	failed map[string]bool // orders whose FailOnce failure happened
}

// Start connects to NATS, makes sure the streams and the durable consumer
// exist, sets the OpenTelemetry providers and the observer up, serves
// /metrics and starts consuming. ctx bounds the setup only.
func Start(ctx context.Context, cfg Config) (_ *Service, err error) {
	s := &Service{logger: cmp.Or(cfg.Logger, slog.Default()), failed: map[string]bool{}, served: make(chan error, 1)}
	defer func() {
		if err != nil {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			err = errors.Join(err, s.Shutdown(sctx))
		}
	}()

	// Metrics: the Prometheus exporter is a reader of the MeterProvider;
	// it registers its collector on a registry of our own, which the
	// handler serves.
	res := resource.NewSchemaless(attribute.String("service.name", "dedup-observability-example"))
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	s.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithResource(res))
	// Traces: one span per delivery, written to cfg.Traces. A batcher
	// exports in the background; Shutdown flushes it.
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if cfg.Traces != nil {
		spans, err := stdouttrace.New(stdouttrace.WithWriter(cfg.Traces))
		if err != nil {
			return nil, fmt.Errorf("stdout trace exporter: %w", err)
		}
		tpOpts = append(tpOpts, sdktrace.WithBatcher(spans))
	}
	s.tp = sdktrace.NewTracerProvider(tpOpts...)

	l, err := net.Listen("tcp", cmp.Or(cfg.MetricsAddr, "127.0.0.1:9464"))
	if err != nil {
		return nil, fmt.Errorf("metrics endpoint: %w", err)
	}
	s.addr = l.Addr().String()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { s.served <- s.srv.Serve(l) }()

	s.nc, err = natsgo.Connect(cmp.Or(cfg.NATSURL, natsgo.DefaultURL), natsgo.Name("dedup observability example"))
	if err != nil {
		return nil, fmt.Errorf("connect to NATS: %w", err)
	}
	s.js, err = jetstream.New(s.nc)
	if err != nil {
		return nil, err
	}
	stream := cmp.Or(cfg.Stream, "DEDUP_OBSERVABILITY")
	s.subject = stream + ".orders"
	dlq := stream + ".dlq"
	// Dead letters go to a stream of their own: the consumer's stream
	// must not capture them (it would read them back).
	for name, subject := range map[string]string{stream: s.subject, stream + "_DLQ": dlq} {
		if _, err := s.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}}); err != nil {
			return nil, fmt.Errorf("stream %s: %w", name, err)
		}
	}
	const group = "billing"
	cons, err := s.js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: group, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 10,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", group, err)
	}

	obs, err := dedupotel.New(&dedupotel.Options{TracerProvider: s.tp, MeterProvider: s.mp, ConsumerGroup: group})
	if err != nil {
		return nil, err
	}
	store, err := memstore.New(nil)
	if err != nil {
		return nil, err
	}
	rcv, err := dedup.NewReceiver(store, idstrategy.BodyField("id", func(o Order) string { return o.ID }), s.charge,
		&dedup.Config{Namespace: group, Observer: obs, Backoff: cfg.Backoff, Logger: s.logger})
	if err != nil {
		return nil, err
	}
	s.consumer, err = dedupnats.NewConsumer(s.js, cons, rcv, &dedupnats.Options{DeadLetterSubject: dlq})
	if err != nil {
		return nil, err
	}
	// Start's context is the consumer's lifetime, not the setup's: Stop
	// ends it.
	if err := s.consumer.Start(context.WithoutCancel(ctx)); err != nil {
		s.consumer = nil
		return nil, err
	}
	return s, nil
}

// charge is the handler: it fails the first run of an order marked
// FailOnce, and answers a receipt.
func (s *Service) charge(_ context.Context, m *dedup.Message[Order]) (string, error) {
	if m.Body.FailOnce {
		s.mu.Lock()
		first := !s.failed[m.Body.ID]
		s.failed[m.Body.ID] = true
		s.mu.Unlock()
		if first {
			return "", fmt.Errorf("charging %s: payment service timed out", m.Body.ID)
		}
	}
	return fmt.Sprintf("receipt-%s-%d", m.Body.ID, m.Body.Cents), nil
}

// MetricsAddr is the address /metrics is served on.
func (s *Service) MetricsAddr() string { return s.addr }

// Subject is the subject the consumed stream captures.
func (s *Service) Subject() string { return s.subject }

// Stopped is closed when the consumer has stopped, asked or not; Err then
// says why if nobody asked.
func (s *Service) Stopped() <-chan struct{} { return s.consumer.Stopped() }

// Shutdown stops the consumer (draining what its workers hold, within
// ctx), flushes and stops the providers, and closes the metrics server
// and the connection. Run it once.
func (s *Service) Shutdown(ctx context.Context) error {
	var errs []error
	if s.consumer != nil {
		// The consumer's drain gets its deadline of its own, shorter than
		// ctx, so that the providers still flush what it reported.
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		errs = append(errs, s.consumer.Stop(cctx))
		cancel()
	}
	if s.tp != nil {
		errs = append(errs, s.tp.Shutdown(ctx))
	}
	if s.mp != nil {
		errs = append(errs, s.mp.Shutdown(ctx))
	}
	if s.srv != nil {
		errs = append(errs, s.srv.Shutdown(ctx))
		if err := <-s.served; !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	}
	if s.nc != nil {
		s.nc.Close()
	}
	return errors.Join(errs...)
}

// Workload says what PublishWorkload published.
type Workload struct {
	// Messages is everything published: Unique orders, plus Duplicates
	// (copies of orders already published) and Poison messages (bodies
	// that are not JSON).
	Messages, Unique, Duplicates, Poison int
	// FailOnce is how many of the unique orders fail their first run.
	FailOnce int
}

// PublishWorkload publishes 200 messages on subject: 145 unique orders (the
// first 10 marked FailOnce), 50 duplicates (a second copy of orders 20 to
// 69, each right after its original) and 5 poison messages. Originals carry
// their id as Nats-Msg-Id; the copies carry none (a producer's retry after
// JetStream's duplicate window, or the same order sent by another system),
// so JetStream keeps them and dedup answers them.
func PublishWorkload(ctx context.Context, js jetstream.JetStream, subject string) (Workload, error) {
	w := Workload{Unique: 145, Duplicates: 50, Poison: 5, FailOnce: 10}
	w.Messages = w.Unique + w.Duplicates + w.Poison
	poisonAt := map[int]bool{5: true, 40: true, 80: true, 110: true, 140: true}
	for i := range w.Unique {
		o := Order{ID: fmt.Sprintf("order-%03d", i), Cents: 100 + i, FailOnce: i < w.FailOnce}
		data, err := json.Marshal(o)
		if err != nil {
			return w, err
		}
		m := natsgo.NewMsg(subject)
		m.Data = data
		m.Header.Set(jetstream.MsgIDHeader, o.ID)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			return w, fmt.Errorf("publish %s: %w", o.ID, err)
		}
		if i >= 20 && i < 20+w.Duplicates {
			if _, err := js.Publish(ctx, subject, data); err != nil {
				return w, fmt.Errorf("publish a copy of %s: %w", o.ID, err)
			}
		}
		if poisonAt[i] {
			if _, err := js.Publish(ctx, subject, []byte("{not json")); err != nil {
				return w, fmt.Errorf("publish poison: %w", err)
			}
		}
	}
	return w, nil
}
