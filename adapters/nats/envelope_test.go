package dedupnats_test

import (
	"context"
	"errors"
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

// seen is what a handler saw of one envelope.
type seen struct {
	Broker, Source, Stream, ID string
	Offset                     int64
	DeliveryCount              int
	Redelivered                bool
	HasTimestamp               bool
	HeaderNil                  bool
	Tenant, LowerTenant        []string // the values of "Tenant" and "tenant"
	Body                       Order
	JetStream, Core            bool // what the typed accessors report
	Reply                      string
	Heartbeat                  error
	Fingerprinted              bool
}

func see(ctx context.Context, m *dedup.Message[Order]) seen {
	s := seen{
		Broker: m.Broker, Source: m.Source, Stream: m.Stream, ID: m.ID, Offset: m.Offset,
		DeliveryCount: m.DeliveryCount, Redelivered: m.Redelivered, HasTimestamp: !m.Timestamp.IsZero(),
		HeaderNil: m.Header == nil, Body: m.Body, Heartbeat: m.Heartbeat(ctx),
	}
	if v, ok := m.HeaderValue("Tenant"); ok {
		s.Tenant = []string{v}
	}
	if v, ok := m.HeaderValue("tenant"); ok {
		s.LowerTenant = []string{v}
	}
	_, s.JetStream = dedupnats.NativeJetStream(m)
	var core *natsgo.Msg
	if core, s.Core = dedupnats.Native(m); s.Core {
		s.Reply = core.Reply
	}
	fp, _ := m.Fingerprint()
	s.Fingerprinted = fp != ""
	return s
}

// bodyID keys on the order id without any strategy of idstrategy, so that
// these tests see the envelope exactly as the adapter filled it.
func bodyID(m *dedup.Message[Order]) (string, error) {
	if m.Body.ID == "" {
		return "", dedup.ErrNoKey
	}
	return m.Body.ID, nil
}

// TestJetStreamEnvelope: a JetStream delivery fills the envelope (source,
// stream and sequence, 1-based delivery count, Nats-Msg-Id, headers matched
// exactly, timestamp, heartbeat through InProgress) and its redelivery says
// so; the typed accessor returns the jetstream.Msg, the core one nothing;
// the settled event names the broker and subject.
func TestJetStreamEnvelope(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		_, js := connect(t, url)
		n := newNames()
		streams(t, js, n)
		cons := consumer(t, js, n, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 5})

		var mu sync.Mutex
		var got []seen
		var failed atomic.Bool
		handler := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
			mu.Lock()
			got = append(got, see(ctx, m))
			mu.Unlock()
			if m.Body.ID == "o-1" && failed.CompareAndSwap(false, true) {
				return Receipt{}, errors.New("try again")
			}
			return Receipt{OrderID: m.Body.ID}, nil
		}
		events := make(chan delivery.Event, 10)
		store, err := memstore.New(nil)
		require.NoError(t, err)
		rcv, err := dedup.NewReceiver(store, bodyID, handler, observed(fastConfig("env"), onSettled(func(e delivery.Event) { sendUntilDone(t, events, e) })))
		require.NoError(t, err)
		c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{Concurrency: 1, Fingerprint: true, DropPoison: true})
		require.NoError(t, err)

		with := natsgo.NewMsg(n.subject)
		with.Data = orderJSON(t, Order{ID: "o-1", Cents: 1})
		with.Header.Set(jetstream.MsgIDHeader, "m-1")
		with.Header.Set("Tenant", "acme")
		_, err = js.PublishMsg(t.Context(), with)
		require.NoError(t, err)
		_, err = js.Publish(t.Context(), n.subject, orderJSON(t, Order{ID: "o-2", Cents: 2}))
		require.NoError(t, err)
		require.NoError(t, c.Start(t.Context()))
		stopAtCleanup(t, c)

		var settledEvents []delivery.Event
		for range 3 { // o-1 fails, o-2, o-1 again
			select {
			case e := <-events:
				settledEvents = append(settledEvents, e)
			case <-time.After(20 * time.Second):
				t.Fatalf("only %d deliveries settled", len(settledEvents))
			}
		}
		settled(t, cons, 10*time.Second)

		mu.Lock()
		defer mu.Unlock()
		first := seen{
			Broker: "jetstream", Source: n.subject, Stream: n.stream, ID: "m-1", Offset: 1,
			DeliveryCount: 1, HasTimestamp: true, Tenant: []string{"acme"}, Body: Order{ID: "o-1", Cents: 1},
			JetStream: true, Fingerprinted: true,
		}
		again := first
		again.DeliveryCount, again.Redelivered = 2, true
		plain := seen{
			Broker: "jetstream", Source: n.subject, Stream: n.stream, Offset: 2,
			DeliveryCount: 1, HasTimestamp: true, HeaderNil: true, Body: Order{ID: "o-2", Cents: 2},
			JetStream: true, Fingerprinted: true,
		}
		require.ElementsMatch(t, []seen{first, again, plain}, got)

		reasons := map[delivery.Reason]int{}
		for _, e := range settledEvents {
			require.Equal(t, dedupnats.BrokerJetStream, e.Broker)
			require.Equal(t, n.subject, e.Source)
			require.Equal(t, "env", e.Namespace)
			require.True(t, e.Settled)
			reasons[e.Decision.Reason]++
		}
		require.Equal(t, map[delivery.Reason]int{delivery.ReasonHandlerError: 1, delivery.ReasonProcessed: 2}, reasons)
	})
}

// TestCoreEnvelope: a core NATS message has no stream, offset, timestamp
// or delivery count (0: unknown), no heartbeat; its *nats.Msg, with the
// request's reply subject, is behind Native.
func TestCoreEnvelope(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		nc, _ := connect(t, url)
		n := newNames()
		got := make(chan seen, 2)
		handler := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
			select { // a surplus delivery must not block the worker
			case got <- see(ctx, m):
			case <-ctx.Done():
				return Receipt{}, ctx.Err()
			}
			return Receipt{OrderID: m.Body.ID}, nil
		}
		events := make(chan delivery.Event, 2)
		store, err := memstore.New(nil)
		require.NoError(t, err)
		rcv, err := dedup.NewReceiver(store, bodyID, handler, observed(fastConfig("env"), onSettled(func(e delivery.Event) { sendUntilDone(t, events, e) })))
		require.NoError(t, err)
		sub, err := dedupnats.NewSubscriber(nc, n.subject, "", rcv, &dedupnats.Options{DropPoison: true})
		require.NoError(t, err)
		require.NoError(t, sub.Start(t.Context()))
		stopAtCleanup(t, sub)

		req := natsgo.NewMsg(n.subject)
		req.Data = orderJSON(t, Order{ID: "o-1", Cents: 1})
		req.Header.Set(jetstream.MsgIDHeader, "m-1")
		req.Header.Set("tenant", "acme")
		_, err = nc.RequestMsg(req, 10*time.Second)
		require.NoError(t, err)
		require.NoError(t, nc.Publish(n.subject, orderJSON(t, Order{ID: "o-2"})))

		var saw []seen
		for range 2 {
			select {
			case s := <-got:
				saw = append(saw, s)
			case <-time.After(10 * time.Second):
				t.Fatal("the handler did not run")
			}
		}
		for i := range saw { // the request's reply subject is an inbox of its own
			if saw[i].Body.ID == "o-1" {
				require.NotEmpty(t, saw[i].Reply)
				saw[i].Reply = ""
			}
		}
		require.ElementsMatch(t, []seen{
			{Broker: "nats", Source: n.subject, ID: "m-1", LowerTenant: []string{"acme"}, Body: Order{ID: "o-1", Cents: 1}, Core: true},
			{Broker: "nats", Source: n.subject, HeaderNil: true, Body: Order{ID: "o-2"}, Core: true},
		}, saw)
		for range 2 {
			select {
			case e := <-events:
				require.Equal(t, dedupnats.BrokerNATS, e.Broker)
				require.Equal(t, n.subject, e.Source)
				require.Equal(t, delivery.ReasonProcessed, e.Decision.Reason)
			case <-time.After(10 * time.Second):
				t.Fatal("the delivery was not reported")
			}
		}
	})
}

// TestTypedAccessorsOnOtherMessages: an envelope filled by hand, or by
// another broker, has no NATS message behind it.
func TestTypedAccessorsOnOtherMessages(t *testing.T) {
	t.Parallel()
	for _, m := range []*dedup.Message[Order]{nil, {}, {Broker: "fake", Native: "not a NATS message"}, {Native: (*natsgo.Msg)(nil)}} {
		_, ok := dedupnats.NativeJetStream(m)
		require.False(t, ok)
		_, ok = dedupnats.Native(m)
		require.False(t, ok)
	}
}

// TestDeadLetterPublishFails: when the dead-letter stream refuses the dead
// letter (full), the poison message is Nak'd with the receiver's
// StoreRetryDelay, not terminated, and the failure is reported; once the
// stream has room, the next delivery dead-letters it.
func TestDeadLetterPublishFails(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		_, js := connect(t, url)
		n := newNames()
		ctx := t.Context()
		for name, cfg := range map[string]jetstream.StreamConfig{
			n.stream:    {Subjects: []string{n.subject}},
			n.dlqStream: {Subjects: []string{n.dlq}, MaxMsgs: 1, Discard: jetstream.DiscardNew},
		} {
			cfg.Name, cfg.Storage = name, jetstream.MemoryStorage
			_, err := js.CreateStream(ctx, cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
		}
		// The dead-letter stream is full before the poison arrives.
		_, err := js.Publish(ctx, n.dlq, []byte("an earlier dead letter"))
		require.NoError(t, err)
		// Only a Nak with a short delay brings the poison back within the
		// test: AckWait and the handler backoff are an hour.
		cons := consumer(t, js, n, jetstream.ConsumerConfig{AckWait: time.Hour, MaxDeliver: 100})

		cfg := fastConfig("dl")
		cfg.Backoff = dedup.BackoffFunc(func(int) time.Duration { return time.Hour })
		failures := make(chan delivery.Event, 100)
		var deadLettered atomic.Bool
		cfg.Observer = onSettled(func(e delivery.Event) {
			if errors.Is(e.SettleErr, dedupnats.ErrDeadLetter) {
				select {
				case failures <- e:
				default: // the test has seen enough
				}
			} else if e.Decision.Action == delivery.DeadLetter {
				deadLettered.Store(true)
			}
		})
		store, err := memstore.New(nil)
		require.NoError(t, err)
		rcv, err := dedup.NewReceiver(store, bodyID, func(context.Context, *dedup.Message[Order]) (Receipt, error) { return Receipt{}, nil }, cfg)
		require.NoError(t, err)
		c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DeadLetterSubject: n.dlq, Concurrency: 1})
		require.NoError(t, err)
		_, err = js.Publish(ctx, n.subject, []byte("not json"))
		require.NoError(t, err)
		require.NoError(t, c.Start(ctx))
		stopAtCleanup(t, c)

		for i := range 2 { // refused, Nak'd, redelivered, refused again
			select {
			case e := <-failures:
				require.Equal(t, delivery.DeadLetter, e.Decision.Action)
				require.Equal(t, delivery.ReasonUndecodable, e.Decision.Reason)
			case <-time.After(20 * time.Second):
				t.Fatalf("dead-letter failure %d was not reported: the message was not redelivered", i+1)
			}
		}
		require.False(t, deadLettered.Load())
		// Counted before each failure is reported.
		require.GreaterOrEqual(t, c.Stats().SettleFailures, uint64(2))
		require.Zero(t, c.Stats().DeadLettered)

		dlq, err := js.Stream(ctx, n.dlqStream)
		require.NoError(t, err)
		require.NoError(t, dlq.Purge(ctx))
		require.Eventually(t, deadLettered.Load, 20*time.Second, 20*time.Millisecond, "the dead letter never went out")
		require.EqualValues(t, 1, c.Stats().DeadLettered)
		settled(t, cons, 10*time.Second)
		dead := deadLetters(t, js, n, 1, 10*time.Second)
		require.Len(t, dead, 1)
		require.Equal(t, "undecodable", dead[0].Headers().Get(delivery.HeaderReason))
		require.Equal(t, "not json", string(dead[0].Data()))
	})
}
