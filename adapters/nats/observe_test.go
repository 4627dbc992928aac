package dedupnats_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store/memstore"
)

// traceHeader is the header fakeTracer's Inject writes.
const traceHeader = "Test-Trace"

type traceKey struct{}

// traceOf is the trace fakeTracer put in ctx, "" for none.
func traceOf(ctx context.Context) string {
	s, _ := ctx.Value(traceKey{}).(string)
	return s
}

// traced is an event with the trace of the context it was observed with.
type traced struct {
	delivery.Event
	trace string
}

// fakeTracer is an Observer that is a delivery.DeliveryStarter (it gives each
// delivery a trace of its own, in its context) and a delivery.Injector (it
// writes the trace of a context into traceHeader): what a tracing
// Observer does, without OpenTelemetry. It records every event, settled
// or not, with the trace of the context it came with.
type fakeTracer struct {
	next   atomic.Int64
	mu     sync.Mutex
	events []traced
}

func (f *fakeTracer) StartDelivery(ctx context.Context, o delivery.Origin) context.Context {
	return context.WithValue(ctx, traceKey{}, fmt.Sprintf("trace-%d-%s", f.next.Add(1), o.Broker))
}

func (f *fakeTracer) Inject(ctx context.Context, set func(key, value string)) {
	if tr := traceOf(ctx); tr != "" {
		set(traceHeader, tr)
	}
}

func (f *fakeTracer) Observe(ctx context.Context, e delivery.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, traced{Event: e, trace: traceOf(ctx)})
}

func (f *fakeTracer) seen() []traced {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]traced(nil), f.events...)
}

// waitEvents waits until f has seen n events.
func (f *fakeTracer) waitEvents(t *testing.T, n int) []traced {
	t.Helper()
	require.Eventually(t, func() bool { return len(f.seen()) >= n }, 20*time.Second, 10*time.Millisecond, "events did not arrive")
	return f.seen()
}

var (
	_ delivery.DeliveryStarter = (*fakeTracer)(nil)
	_ delivery.Injector        = (*fakeTracer)(nil)
)

// traceLog is a slog.Handler that records, for each record, its message
// and the trace in the context it was logged with.
type traceLog struct {
	mu    sync.Mutex
	lines map[string][]string // message -> traces
}

func (h *traceLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *traceLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *traceLog) WithGroup(string) slog.Handler            { return h }
func (h *traceLog) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lines == nil {
		h.lines = map[string][]string{}
	}
	h.lines[r.Message] = append(h.lines[r.Message], traceOf(ctx))
	return nil
}

func (h *traceLog) traces(msg string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.lines[msg]...)
}

// TestJetStreamOneEventPerDelivery: every JetStream delivery (a new
// order, a copy answered as a duplicate, a handler failure Nak'd and its
// redelivery, an undecodable body, a body without a key) is reported
// once, settled, with where it came from (broker, subject, stream, stream
// sequence, delivery count) and what was done; there are as many events
// as the server made deliveries. Stats counts them in the shared shape.
// The dead letters carry the trace context of their own delivery (the
// Observer's Injector), replacing the producer's.
func TestJetStreamOneEventPerDelivery(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		_, js := connect(t, url)
		n := newNames()
		streams(t, js, n)
		cons := consumer(t, js, n, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 5})
		obs := &fakeTracer{}
		var failed atomic.Bool
		store, err := memstore.New(nil)
		require.NoError(t, err)
		rcv, err := dedup.NewReceiver(store, bodyID, func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
			if m.Body.ID == "o-2" && failed.CompareAndSwap(false, true) {
				return Receipt{}, errors.New("gateway timeout")
			}
			return Receipt{OrderID: m.Body.ID}, nil
		}, observed(fastConfig("obs"), obs))
		require.NoError(t, err)
		c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{Concurrency: 1, DeadLetterSubject: n.dlq})
		require.NoError(t, err)

		publish := func(data []byte, msgID string) uint64 {
			m := natsgo.NewMsg(n.subject)
			m.Data = data
			m.Header.Set(traceHeader, "producer")
			if msgID != "" {
				m.Header.Set(jetstream.MsgIDHeader, msgID)
			}
			ack, err := js.PublishMsg(t.Context(), m)
			require.NoError(t, err)
			return ack.Sequence
		}
		seqFirst := publish(orderJSON(t, Order{ID: "o-1", Cents: 1}), "m-1")
		seqCopy := publish(orderJSON(t, Order{ID: "o-1", Cents: 1}), "")
		seqFailing := publish(orderJSON(t, Order{ID: "o-2", Cents: 2}), "m-2")
		seqUndecodable := publish([]byte("not json"), "")
		seqNoKey := publish(orderJSON(t, Order{Cents: 3}), "")
		require.NoError(t, c.Start(t.Context()))
		stopAtCleanup(t, c)

		obs.waitEvents(t, 6)
		settled(t, cons, 20*time.Second)
		dead := deadLetters(t, js, n, 2, 10*time.Second)
		require.NoError(t, c.Stop(t.Context()))
		info, err := cons.Info(t.Context())
		require.NoError(t, err)
		events := obs.seen()
		require.Len(t, events, 6)
		require.EqualValues(t, info.Delivered.Consumer, len(events), "one event per delivery the server made")

		type where struct {
			offset   uint64
			count    int
			reason   delivery.Reason
			action   delivery.Action
			msgID    string
			settleOK bool
		}
		var got []where
		traceAt := map[uint64]string{}
		for _, e := range events {
			require.True(t, e.Settled, "%+v", e.Event)
			require.Equal(t, dedupnats.BrokerJetStream, e.Broker)
			require.Equal(t, n.subject, e.Source)
			require.Equal(t, n.stream, e.Stream)
			require.Equal(t, "obs", e.Namespace)
			require.NotEmpty(t, e.trace, "observed with the delivery's context")
			require.NotNil(t, e.Header)
			v, ok := e.Header.Get(traceHeader)
			require.True(t, ok)
			require.Equal(t, "producer", v, "the origin's headers are the message's")
			got = append(got, where{uint64(e.Offset), e.DeliveryCount, e.Decision.Reason, e.Decision.Action, e.MessageID, e.SettleErr == nil})
			if e.Decision.Action == delivery.DeadLetter {
				traceAt[uint64(e.Offset)] = e.trace
				require.Positive(t, e.SettleDuration, "the dead letter's publish is timed")
			}
		}
		require.ElementsMatch(t, []where{
			{seqFirst, 1, delivery.ReasonProcessed, delivery.Ack, "m-1", true},
			{seqCopy, 1, delivery.ReasonDuplicate, delivery.Ack, "", true},
			{seqFailing, 1, delivery.ReasonHandlerError, delivery.Retry, "m-2", true},
			{seqFailing, 2, delivery.ReasonProcessed, delivery.Ack, "m-2", true},
			{seqUndecodable, 1, delivery.ReasonUndecodable, delivery.DeadLetter, "", true},
			{seqNoKey, 1, delivery.ReasonNoKey, delivery.DeadLetter, "", true},
		}, got)

		require.Len(t, dead, 2)
		for _, m := range dead {
			seq, err := strconv.ParseUint(m.Headers().Get(delivery.HeaderOffset), 10, 64)
			require.NoError(t, err)
			require.NotEmpty(t, traceAt[seq])
			require.Equal(t, []string{traceAt[seq]}, m.Headers().Values(traceHeader),
				"the dead letter carries its delivery's trace context, not the producer's")
		}

		require.Equal(t, dedup.ConsumerStats{Delivered: 6, Acked: 3, RetriedInPlace: 1, DeadLettered: 2}, c.Stats())
		require.Equal(t, map[delivery.Reason]uint64{delivery.ReasonUndecodable: 1, delivery.ReasonNoKey: 1}, rcv.Stats().DeadLetters)
	})
}

// TestCoreOneEventPerDelivery: every core NATS message (a request, the
// same request again, a plain message, an undecodable plain message, a
// request without a key) is reported once, settled, from broker "nats"
// and its subject, without stream, offset or delivery count. Replies and
// dead letters carry the trace context of their delivery. Stats counts
// each delivery once.
func TestCoreOneEventPerDelivery(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		nc, js := connect(t, url)
		n := newNames()
		streams(t, js, n) // the dead-letter stream
		subject := n.subject + "-core"
		obs := &fakeTracer{}
		rcv := okReceiver(t, newEffects(), observed(fastConfig("obs"), obs))
		sub, err := dedupnats.NewSubscriber(nc, subject, "", rcv, &dedupnats.Options{DeadLetterSubject: n.dlq})
		require.NoError(t, err)
		require.NoError(t, sub.Start(t.Context()))
		stopAtCleanup(t, sub)

		request := func(data []byte) *natsgo.Msg {
			m := natsgo.NewMsg(subject)
			m.Data = data
			m.Header.Set(traceHeader, "producer")
			reply, err := nc.RequestMsg(m, 10*time.Second)
			require.NoError(t, err)
			return reply
		}
		first := request(orderJSON(t, Order{ID: "o-1"}))
		again := request(orderJSON(t, Order{ID: "o-1"}))
		refused := request(orderJSON(t, Order{Cents: 1}))
		plain := natsgo.NewMsg(subject)
		plain.Data = orderJSON(t, Order{ID: "o-2"})
		require.NoError(t, nc.PublishMsg(plain))
		poison := natsgo.NewMsg(subject)
		poison.Data = []byte("not json")
		poison.Header.Set(traceHeader, "producer")
		require.NoError(t, nc.PublishMsg(poison))

		obs.waitEvents(t, 5)
		dead := deadLetters(t, js, n, 2, 10*time.Second)
		require.NoError(t, sub.Stop(t.Context()))
		events := obs.seen()
		require.Len(t, events, 5)

		type what struct {
			reason delivery.Reason
			action delivery.Action
		}
		var got []what
		traceOfReason := map[delivery.Reason][]string{}
		for _, e := range events {
			require.True(t, e.Settled, "%+v", e.Event)
			require.NoError(t, e.SettleErr)
			require.Equal(t, dedupnats.BrokerNATS, e.Broker)
			require.Equal(t, subject, e.Source)
			require.Empty(t, e.Stream)
			require.Zero(t, e.Offset)
			require.Zero(t, e.DeliveryCount)
			require.NotEmpty(t, e.trace)
			got = append(got, what{e.Decision.Reason, e.Decision.Action})
			traceOfReason[e.Decision.Reason] = append(traceOfReason[e.Decision.Reason], e.trace)
		}
		require.ElementsMatch(t, []what{
			{delivery.ReasonProcessed, delivery.Ack}, {delivery.ReasonDuplicate, delivery.Ack}, {delivery.ReasonProcessed, delivery.Ack},
			{delivery.ReasonNoKey, delivery.DeadLetter}, {delivery.ReasonUndecodable, delivery.DeadLetter},
		}, got)

		// Each reply carries the trace of the delivery it answers.
		require.Contains(t, traceOfReason[delivery.ReasonProcessed], first.Header.Get(traceHeader))
		require.Equal(t, traceOfReason[delivery.ReasonDuplicate], []string{again.Header.Get(traceHeader)})
		require.Equal(t, traceOfReason[delivery.ReasonNoKey], []string{refused.Header.Get(traceHeader)})
		require.Equal(t, string(delivery.ReasonNoKey), refused.Header.Get(delivery.HeaderReason))
		// Each dead letter carries the trace of its delivery, not the
		// producer's.
		require.Len(t, dead, 2)
		for _, m := range dead {
			reason := delivery.Reason(m.Headers().Get(delivery.HeaderReason))
			require.Len(t, traceOfReason[reason], 1, reason)
			require.Equal(t, traceOfReason[reason], m.Headers().Values(traceHeader), reason)
		}

		require.Equal(t, dedup.ConsumerStats{Delivered: 5, Acked: 3, DeadLettered: 2}, sub.Stats())
		require.Zero(t, sub.Stats().SlowConsumerDropped)
	})
}

// TestDropPoisonReportedAsDone: under DropPoison, a poison message
// terminated (JetStream) or dropped (core NATS) is reported as done with
// its reason (Decision Ack, reason undecodable: it is not a dead letter),
// counted in Stats().PoisonDropped, and logged with the delivery's
// context.
func TestDropPoisonReportedAsDone(t *testing.T) {
	t.Parallel()
	const dropped = "dedupnats: poison message dropped (DropPoison, no DeadLetterSubject)"
	check := func(t *testing.T, obs *fakeTracer, logs *traceLog, stats dedup.ConsumerStats) {
		events := obs.waitEvents(t, 1)
		require.Len(t, events, 1)
		e := events[0]
		require.True(t, e.Settled)
		require.NoError(t, e.SettleErr)
		require.Equal(t, delivery.Ack, e.Decision.Action)
		require.Equal(t, delivery.ReasonUndecodable, e.Decision.Reason)
		require.ErrorIs(t, e.Decision.Err, dedup.ErrUndecodable)
		require.Equal(t, dedup.ConsumerStats{Delivered: 1, PoisonDropped: 1}, stats)
		require.Equal(t, []string{e.trace}, logs.traces(dropped), "logged with the delivery's context")
	}
	t.Run("jetstream", func(t *testing.T) {
		t.Parallel()
		_, js := connect(t, embedded(t))
		n := newNames()
		streams(t, js, n)
		cons := consumer(t, js, n, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 5})
		obs, logs := &fakeTracer{}, &traceLog{}
		rcv := okReceiver(t, newEffects(), observed(fastConfig("drop"), obs))
		c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DropPoison: true, Logger: slog.New(logs)})
		require.NoError(t, err)
		_, err = js.Publish(t.Context(), n.subject, []byte("not json"))
		require.NoError(t, err)
		require.NoError(t, c.Start(t.Context()))
		stopAtCleanup(t, c)
		settled(t, cons, 20*time.Second)
		require.NoError(t, c.Stop(t.Context()))
		check(t, obs, logs, c.Stats())
	})
	t.Run("core", func(t *testing.T) {
		t.Parallel()
		nc, _ := connect(t, embedded(t))
		n := newNames()
		obs, logs := &fakeTracer{}, &traceLog{}
		rcv := okReceiver(t, newEffects(), observed(fastConfig("drop"), obs))
		s, err := dedupnats.NewSubscriber(nc, n.subject, "", rcv, &dedupnats.Options{DropPoison: true, Logger: slog.New(logs)})
		require.NoError(t, err)
		require.NoError(t, s.Start(t.Context()))
		stopAtCleanup(t, s)
		require.NoError(t, nc.Publish(n.subject, []byte("not json")))
		obs.waitEvents(t, 1)
		require.NoError(t, s.Stop(t.Context()))
		check(t, obs, logs, s.Stats())
	})
}

// TestDeadLetterCutKeepsTraceContext: a dead letter whose original
// headers alone do not fit the dead-letter stream's MaxMsgSize loses them,
// but not the trace context of its delivery.
func TestDeadLetterCutKeepsTraceContext(t *testing.T) {
	t.Parallel()
	_, js := connect(t, embedded(t))
	n := newNames()
	for name, cfg := range map[string]jetstream.StreamConfig{
		n.stream:    {Subjects: []string{n.subject}},
		n.dlqStream: {Subjects: []string{n.dlq}, MaxMsgSize: 2048},
	} {
		cfg.Name, cfg.Storage = name, jetstream.MemoryStorage
		_, err := js.CreateStream(t.Context(), cfg)
		require.NoError(t, err)
	}
	cons := consumer(t, js, n, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 5})
	obs := &fakeTracer{}
	rcv := okReceiver(t, newEffects(), observed(fastConfig("cut"), obs))
	c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DeadLetterSubject: n.dlq})
	require.NoError(t, err)
	m := natsgo.NewMsg(n.subject)
	m.Data = []byte("not json")
	m.Header.Set("Big", string(make([]byte, 1800)))
	m.Header.Set(traceHeader, "producer")
	_, err = js.PublishMsg(t.Context(), m)
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)

	dead := deadLetters(t, js, n, 1, 20*time.Second)
	require.Len(t, dead, 1)
	h := dead[0].Headers()
	require.Contains(t, h.Get(dedupnats.HeaderTruncated), "original headers cut")
	require.Empty(t, h.Get("Big"))
	events := obs.waitEvents(t, 1)
	require.Equal(t, []string{events[0].trace}, h.Values(traceHeader))
	require.EqualValues(t, 1, c.Stats().DeadLettersTruncated)
}
