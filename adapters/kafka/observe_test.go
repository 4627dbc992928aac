package dedupkafka_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/adaptertest"
	"github.com/dedup-go/dedup/store/memstore"
)

// tracer stands for a tracing Observer (adaptertest.Tracer).
type tracer = adaptertest.Tracer

// traceparents returns the values of every traceparent header of m.
func traceparents(m kafka.Message) []string {
	var out []string
	for k, v := range dedupkafka.Header(m.Headers).All() {
		if k == "traceparent" {
			out = append(out, v)
		}
	}
	return out
}

type outcome struct {
	action delivery.Action
	reason delivery.Reason
}

// TestOneEventPerDelivery: every handing of a message to the receiver is
// one delivery, reported once to the Observer, settled, with the message's
// origin: an order processed, an undecodable value (Refused), an order
// retried in place twice (three deliveries), a duplicate and a permanent
// failure make seven events, under the context of their own delivery. The
// dead letters carry the trace context of their delivery (replacing the
// producer's), and Stats counts what was done. One at a time and in
// batches (DeliverBatch).
func TestOneEventPerDelivery(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{1, 4} {
		t.Run("batch-"+strconv.Itoa(batch), func(t *testing.T) {
			t.Parallel()
			testOneEventPerDelivery(t, batch)
		})
	}
}

func testOneEventPerDelivery(t *testing.T, batch int) {
	const topic, dlq, group = "orders", "orders.dlq", "billing"
	brokers := startKafka(t, 1, topic, dlq)
	produce(t, newWriter(t, brokers), topic, []kafka.Message{
		{Value: orderJSON(t, Order{ID: "o-0", Cents: 1})},
		{Value: []byte("not json"), Headers: []kafka.Header{{Key: "traceparent", Value: []byte("producer")}}},
		{Value: orderJSON(t, Order{ID: "o-2", Cents: 1})},
		{Value: orderJSON(t, Order{ID: "o-0", Cents: 1})},
		{Value: orderJSON(t, Order{ID: "o-4", Cents: -1})},
	})

	var tr tracer
	var o2 atomic.Int32
	cfg := fastConfig("billing")
	cfg.Observer = &tr
	s, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(s, idstrategy.BodyField("id", func(o Order) string { return o.ID }),
		func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
			if err := ctx.Err(); err != nil {
				return Receipt{}, err
			}
			if m.Body.Cents < 0 {
				return Receipt{}, dedup.Permanent(errors.New("declined"))
			}
			if m.Body.ID == "o-2" && o2.Add(1) <= 2 {
				return Receipt{}, errors.New("payment service timed out")
			}
			return Receipt{OrderID: m.Body.ID}, nil
		}, cfg)
	require.NoError(t, err)
	c, err := dedupkafka.NewConsumer(newReader(t, brokers, group, topic), rcv, &dedupkafka.Options{
		DeadLetterTopic: dlq, CommitInterval: 10 * time.Millisecond, BatchSize: batch, Linger: 100 * time.Millisecond,
		MinRetryDelay: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)

	eventually(t, 30*time.Second, func() bool { return tr.Count() >= 7 }, "every delivery reported")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(ctx))
	require.Equal(t, map[int]int64{0: 5}, committed(t, brokers, group, topic, 1))

	events, spans, started := tr.Snapshot()
	require.Len(t, events, 7, "one event per delivery")
	require.Equal(t, 7, started, "one delivery started per handing over")
	got := map[int64][]outcome{}
	spanOf := map[int64]string{}
	seen := map[string]bool{}
	for i, e := range events {
		require.True(t, e.Settled, "event %d not settled", i)
		require.NoError(t, e.SettleErr)
		require.Equal(t, dedupkafka.BrokerKafka, e.Broker)
		require.Equal(t, topic, e.Source)
		require.Equal(t, topic, e.Stream)
		require.Zero(t, e.Partition)
		require.Equal(t, "billing", e.Namespace)
		require.NotEmpty(t, spans[i], "event %d not observed with its delivery's context", i)
		require.False(t, seen[spans[i]], "two events of one delivery: %s", spans[i])
		seen[spans[i]] = true
		require.Contains(t, spans[i], "-orders-"+strconv.FormatInt(e.Offset, 10), "the event's context is another delivery's")
		got[e.Offset] = append(got[e.Offset], outcome{e.Decision.Action, e.Decision.Reason})
		spanOf[e.Offset] = spans[i]
	}
	require.Equal(t, map[int64][]outcome{
		0: {{delivery.Ack, delivery.ReasonProcessed}},
		1: {{delivery.DeadLetter, delivery.ReasonUndecodable}},
		2: {{delivery.Retry, delivery.ReasonHandlerError}, {delivery.Retry, delivery.ReasonHandlerError}, {delivery.Ack, delivery.ReasonProcessed}},
		3: {{delivery.Ack, delivery.ReasonDuplicate}},
		4: {{delivery.DeadLetter, delivery.ReasonPermanent}},
	}, got)
	require.Equal(t, dedup.ConsumerStats{Delivered: 5, Acked: 3, RetriedInPlace: 2, DeadLettered: 2}, c.Stats())
	require.Equal(t, map[delivery.Reason]uint64{delivery.ReasonUndecodable: 1, delivery.ReasonPermanent: 1}, rcv.Stats().DeadLetters)

	letters := readAll(t, brokers, dlq, 2)
	for _, l := range letters {
		off, err := strconv.ParseInt(header(t, l, delivery.HeaderOffset), 10, 64)
		require.NoError(t, err)
		require.Equal(t, []string{spanOf[off]}, traceparents(l), "the dead letter of offset %d carries its delivery's trace context, once", off)
	}
}

// TestRetryCopyCarriesTraceContext: a message written to a retry topic
// carries the trace context of the delivery that failed, and that
// delivery is reported once, settled, when the copy was written.
func TestRetryCopyCarriesTraceContext(t *testing.T) {
	t.Parallel()
	const topic, group = "orders", "billing"
	tiers := []time.Duration{300 * time.Millisecond}
	retry1 := adapter.RetryName(topic, tiers[0])
	brokers := startKafka(t, 1, topic, retry1)
	produceIDs(t, brokers, topic, orderID(0))

	var tr tracer
	cfg := fastConfig("billing")
	cfg.Observer = &tr
	cfg.Backoff = dedup.BackoffFunc(func(int) time.Duration { return tiers[0] })
	s, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(s, idstrategy.MessageHeader[Order](dedupkafka.HeaderMessageID),
		func(context.Context, *dedup.Message[Order]) (Receipt, error) {
			return Receipt{}, errors.New("payment service timed out")
		}, cfg)
	require.NoError(t, err)
	c := startConsumer(t, newReader(t, brokers, group, topic), rcv,
		&dedupkafka.Options{DropPoison: true, RetryTopics: tiers, CommitInterval: 10 * time.Millisecond})

	copies := readAll(t, brokers, retry1, 1)
	eventually(t, 10*time.Second, func() bool { return tr.Count() >= 1 }, "the delivery reported")
	stopNow(t, c)
	events, spans, _ := tr.Snapshot()
	require.Len(t, events, 1)
	e := events[0]
	require.True(t, e.Settled)
	require.NoError(t, e.SettleErr)
	require.Equal(t, delivery.Retry, e.Decision.Action)
	require.Equal(t, delivery.ReasonHandlerError, e.Decision.Reason)
	require.Equal(t, []string{spans[0]}, traceparents(copies[0]), "the retry copy carries its delivery's trace context")
	require.Equal(t, dedup.ConsumerStats{Delivered: 1, RetriedLater: 1}, c.Stats())
}

// TestWriterInjectsTraceContext: a Writer with an Injector writes the
// trace context of its ctx into every message, replacing one the message
// had, without touching the caller's header slices; without one, it adds
// none.
func TestWriterInjectsTraceContext(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	brokers := startKafka(t, 1, topic)
	var tr tracer
	// Headers that already have a Message-Id are not copied by the
	// stamping: the trace context must not be written into them.
	shared := []kafka.Header{
		{Key: dedupkafka.HeaderMessageID, Value: []byte("m-1")}, {Key: "traceparent", Value: []byte("old")}, {Key: "tenant", Value: []byte("acme")},
	}
	traced := &dedupkafka.Writer{W: newWriter(t, brokers), Injector: &tr}
	ctx := adaptertest.WithSpan(t.Context(), "span-producer")
	require.NoError(t, traced.WriteMessages(ctx,
		kafka.Message{Topic: topic, Value: []byte(`{"id":"a"}`), Headers: shared[:2:2]},
		kafka.Message{Topic: topic, Value: []byte(`{"id":"b"}`), Headers: shared},
		kafka.Message{Topic: topic, Value: []byte(`{"id":"c"}`)},
	))
	plain := &dedupkafka.Writer{W: newWriter(t, brokers)}
	require.NoError(t, plain.WriteMessages(ctx, kafka.Message{Topic: topic, Value: []byte(`{"id":"d"}`)}))

	require.Equal(t, "old", string(shared[1].Value), "the caller's headers were written over")
	msgs := readAll(t, brokers, topic, 4)
	for _, m := range msgs[:3] {
		require.Equal(t, []string{"span-producer"}, traceparents(m), "message %s", m.Value)
		header(t, m, dedupkafka.HeaderMessageID)
	}
	require.Equal(t, "acme", header(t, msgs[1], "tenant"))
	require.Equal(t, "m-1", header(t, msgs[1], dedupkafka.HeaderMessageID), "the producer's id kept")
	require.Empty(t, traceparents(msgs[3]), "a Writer without an Injector wrote a trace context")
}

// spanLogs is a slog.Handler that records, for each message logged, the
// span its context carried (as a trace-aware handler adds trace ids).
type spanLogs struct {
	mu    sync.Mutex
	spans map[string]string // message -> span
}

func (h *spanLogs) Enabled(context.Context, slog.Level) bool { return true }

func (h *spanLogs) Handle(ctx context.Context, r slog.Record) error {
	span, _ := adaptertest.SpanOf(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.spans[r.Message] = span
	return nil
}

func (h *spanLogs) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *spanLogs) WithGroup(string) slog.Handler      { return h }

func (h *spanLogs) span(msg string) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.spans[msg]
	return s, ok
}

// TestLogsCarryDeliveryContext: what the Consumer logs about a delivery
// (a poison message dropped) is logged with the delivery's context, so
// that a trace-aware handler ties it to the delivery's span.
func TestLogsCarryDeliveryContext(t *testing.T) {
	t.Parallel()
	const topic, group = "orders", "billing"
	brokers := startKafka(t, 1, topic)
	produce(t, newWriter(t, brokers), topic, []kafka.Message{{Value: []byte("not json")}})

	var tr tracer
	logs := &spanLogs{spans: map[string]string{}}
	cfg := fastConfig("billing")
	cfg.Observer = &tr
	cfg.Logger = slog.New(logs)
	s, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(s, idstrategy.BodyField("id", func(o Order) string { return o.ID }),
		func(_ context.Context, m *dedup.Message[Order]) (Receipt, error) {
			return Receipt{OrderID: m.Body.ID}, nil
		}, cfg)
	require.NoError(t, err)
	c := startConsumer(t, newReader(t, brokers, group, topic), rcv, &dedupkafka.Options{DropPoison: true})
	eventually(t, 30*time.Second, func() bool { return tr.Count() == 1 }, "the poison's delivery reported")
	stopNow(t, c)
	_, spans, _ := tr.Snapshot()
	span, ok := logs.span("dedupkafka: poison message dropped (DropPoison): committed past without a dead letter")
	require.True(t, ok, "the drop was not logged")
	require.Equal(t, spans[0], span, "the drop was logged without its delivery's context")
}
