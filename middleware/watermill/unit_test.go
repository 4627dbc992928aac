package dedupwatermill_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
	dedupwatermill "github.com/dedup-go/dedup/middleware/watermill"
	"github.com/dedup-go/dedup/store"
)

// recorder is an Observer keeping every event.
type recorder struct {
	mu     sync.Mutex
	events []delivery.Event
}

func (r *recorder) Observe(_ context.Context, e delivery.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) all() []delivery.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery.Event(nil), r.events...)
}

// routed returns a message outside a router (whose context values only a
// router sets): its scope is in the metadata, for metadataScope.
func routed(uuid, topic, _ string) *message.Message {
	m := message.NewMessage(uuid, []byte("payload of "+uuid))
	m.Metadata.Set("topic", topic)
	return m
}

func TestDuplicateGetsProducedMessages(t *testing.T) {
	t.Parallel()
	mw := newMiddleware(t, newMemstore(t), "unit", nil)
	var runs atomic.Int32
	h := mw.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		runs.Add(1)
		o := message.NewMessage("out-"+msg.UUID, []byte("p"))
		o.Metadata.Set("a", "1")
		return message.Messages{o}, nil
	})
	first, err := h(routed("m1", "t", "h"))
	require.NoError(t, err)
	second, err := h(routed("m1", "t", "h"))
	require.NoError(t, err)
	require.EqualValues(t, 1, runs.Load())
	require.Len(t, second, 1)
	require.Equal(t, first[0].UUID, second[0].UUID)
	require.Equal(t, first[0].Payload, second[0].Payload)
	require.Equal(t, first[0].Metadata, second[0].Metadata)
	require.NotSame(t, first[0], second[0])
}

func metadataScope(m *message.Message) string { return m.Metadata.Get("topic") }

func TestScope(t *testing.T) {
	t.Parallel()
	mw := newMiddleware(t, newMemstore(t), "unit", &dedupwatermill.Options{Scope: metadataScope})
	var runs atomic.Int32
	h := mw.Middleware(func(*message.Message) ([]*message.Message, error) { runs.Add(1); return nil, nil })
	for _, topic := range []string{"a", "b", "a"} {
		_, err := h(routed("same-uuid", topic, "h"))
		require.NoError(t, err)
	}
	require.EqualValues(t, 2, runs.Load(), "one run per topic")
}

// TestInFlightHeldNotAcked: a message whose id another delivery holds is
// held in the handler (looked at again after the receiver's delay, never
// in a hot loop) and nacked with ErrInFlight at MaxHold, never acked.
func TestInFlightHeldNotAcked(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	mw := newMiddleware(t, newMemstore(t), "unit", &dedupwatermill.Options{
		Config: &dedup.Config{NoWait: true, Observer: rec}, MaxHold: 700 * time.Millisecond})
	release := make(chan struct{})
	started := make(chan struct{})
	h := mw.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		close(started)
		select {
		case <-release:
		case <-msg.Context().Done():
			return nil, msg.Context().Err()
		}
		return nil, nil
	})
	firstDone := make(chan error, 1)
	go func() { _, err := h(routed("busy", "t", "h")); firstDone <- err }()
	testenv.Recv(t, started, "the first delivery's handler")
	began := time.Now()
	_, err := h(routed("busy", "t", "h"))
	held := time.Since(began)
	require.ErrorIs(t, err, dedupwatermill.ErrInFlight)
	require.False(t, dedupwatermill.IsPoison(err))
	require.GreaterOrEqual(t, held, 600*time.Millisecond, "held in place")
	looks := 0
	for _, e := range rec.all() {
		if e.Status == delivery.StatusInFlight {
			looks++
		}
	}
	// 200 ms, then 400 ms: two or three looks in 700 ms, not hundreds.
	require.LessOrEqual(t, looks, 4)
	require.GreaterOrEqual(t, looks, 2)
	close(release)
	require.NoError(t, testenv.Recv(t, firstDone, "the first delivery"))
}

func TestTooLargeNotKeptDuplicateIsPoison(t *testing.T) {
	t.Parallel()
	mw := newMiddleware(t, newMemstore(t), "unit", &dedupwatermill.Options{Config: &dedup.Config{MaxResultSize: 1000}})
	var runs atomic.Int32
	h := mw.Middleware(func(*message.Message) ([]*message.Message, error) {
		runs.Add(1)
		return message.Messages{message.NewMessage("big", make([]byte, 2000))}, nil
	})
	out, err := h(routed("m", "t", "h"))
	require.NoError(t, err)
	require.Len(t, out, 1, "the first delivery publishes what it produced")
	_, err = h(routed("m", "t", "h"))
	require.ErrorIs(t, err, dedupwatermill.ErrResultNotKept)
	require.True(t, dedupwatermill.IsPoison(err))
	require.Contains(t, err.Error(), "MaxResultSize")
	require.EqualValues(t, 1, runs.Load(), "the handler never runs again")
}

// downStore is a store whose Acquire fails while down is set.
type downStore struct {
	store.Store
	down atomic.Bool
}

func (s *downStore) Acquire(ctx context.Context, req store.AcquireRequest) (store.Claim, error) {
	if s.down.Load() {
		return store.Claim{}, &store.OpError{Op: "acquire", Err: store.ErrUnavailable}
	}
	return s.Store.Acquire(ctx, req)
}

func TestStoreDown(t *testing.T) {
	t.Parallel()
	st := &downStore{Store: newMemstore(t)}
	st.down.Store(true)
	t.Run("fail-closed", func(t *testing.T) {
		mw := newMiddleware(t, st, "closed", &dedupwatermill.Options{
			Config: &dedup.Config{StoreRetryDelay: 50 * time.Millisecond}, MaxHold: 120 * time.Millisecond})
		var runs atomic.Int32
		h := mw.Middleware(func(*message.Message) ([]*message.Message, error) { runs.Add(1); return nil, nil })
		_, err := h(routed("m", "t", "h"))
		require.ErrorIs(t, err, dedup.ErrStoreUnavailable)
		require.False(t, dedupwatermill.IsPoison(err))
		require.Zero(t, runs.Load())
	})
	t.Run("fail-open", func(t *testing.T) {
		mw := newMiddleware(t, st, "open", &dedupwatermill.Options{Config: &dedup.Config{FailOpen: true}})
		var runs atomic.Int32
		h := mw.Middleware(func(*message.Message) ([]*message.Message, error) {
			runs.Add(1)
			return message.Messages{message.NewMessage("o", nil)}, nil
		})
		out, err := h(routed("m", "t", "h"))
		require.NoError(t, err)
		require.Len(t, out, 1)
		require.EqualValues(t, 1, runs.Load())
		require.EqualValues(t, 1, mw.Stats().Bypassed)
	})
}

func TestHandlerErrorBacksOffThenNacks(t *testing.T) {
	t.Parallel()
	mw := newMiddleware(t, newMemstore(t), "unit", &dedupwatermill.Options{
		Config: &dedup.Config{Backoff: dedup.BackoffFunc(func(int) time.Duration { return 150 * time.Millisecond })}})
	boom := errors.New("boom")
	h := mw.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, boom })
	began := time.Now()
	_, err := h(routed("m", "t", "h"))
	require.ErrorIs(t, err, boom)
	require.False(t, dedupwatermill.IsPoison(err))
	require.GreaterOrEqual(t, time.Since(began), 140*time.Millisecond, "the backoff is held before the nack")
}

func TestPoisonKinds(t *testing.T) {
	t.Parallel()
	t.Run("no key", func(t *testing.T) {
		mw := newMiddleware(t, newMemstore(t), "unit", nil)
		m := routed("", "t", "h")
		_, err := mw.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })(m)
		require.ErrorIs(t, err, dedup.ErrNoKey)
		require.True(t, dedupwatermill.IsPoison(err))
		require.Equal(t, string(delivery.ReasonNoKey), m.Metadata.Get(delivery.HeaderReason))
	})
	t.Run("key reused", func(t *testing.T) {
		mw := newMiddleware(t, newMemstore(t), "unit", &dedupwatermill.Options{FingerprintPayload: true})
		h := mw.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })
		_, err := h(routed("m", "t", "h"))
		require.NoError(t, err)
		other := routed("m", "t", "h")
		other.Payload = []byte("another payload")
		_, err = h(other)
		require.ErrorIs(t, err, dedup.ErrKeyReused)
		require.True(t, dedupwatermill.IsPoison(err))
	})
	t.Run("permanent", func(t *testing.T) {
		mw := newMiddleware(t, newMemstore(t), "unit", nil)
		bad := errors.New("malformed")
		_, err := mw.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, dedup.Permanent(bad) })(routed("m", "t", "h"))
		require.ErrorIs(t, err, bad)
		var perr *dedupwatermill.PoisonError
		require.ErrorAs(t, err, &perr)
		require.Equal(t, delivery.ReasonPermanent, perr.Reason)
	})
}

func TestKeyStrategies(t *testing.T) {
	t.Parallel()
	m := routed("u", "t", "h")
	m.Metadata.Set("order_id", "o-7")
	k, err := dedupwatermill.FromMetadata("order_id")(m)
	require.NoError(t, err)
	require.Equal(t, "o-7", k)
	_, err = dedupwatermill.FromMetadata("missing")(m)
	require.ErrorIs(t, err, dedup.ErrNoKey)
	h, err := dedupwatermill.PayloadHash()(m)
	require.NoError(t, err)
	require.NotEqual(t, "u", h)
	k, err = idstrategy.FirstOf(dedupwatermill.FromMetadata("missing"), dedupwatermill.FromUUID())(m)
	require.NoError(t, err)
	require.Equal(t, "u", k)

	// Through the middleware: two UUIDs with one order id are one message.
	mw := newMiddleware(t, newMemstore(t), "unit", &dedupwatermill.Options{Key: dedupwatermill.FromMetadata("order_id")})
	var runs atomic.Int32
	hf := mw.Middleware(func(*message.Message) ([]*message.Message, error) { runs.Add(1); return nil, nil })
	for _, id := range []string{"u1", "u2"} {
		msg := routed(id, "t", "h")
		msg.Metadata.Set("order_id", "o-7")
		_, err := hf(msg)
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, runs.Load())
	require.Equal(t, "1:t:k", dedupwatermill.RecordID("t", "k", 0))
	require.Equal(t, "k", dedupwatermill.RecordID("", "k", 0))
	require.True(t, strings.HasPrefix(dedupwatermill.RecordID("t", strings.Repeat("x", 600), 0), "sha256:"))
}

// TestEventOrigin: the shared Event carries Watermill's topic and handler
// name (the router's, through a router on Watermill's in-process pub/sub),
// and the settle step; the default scope is the topic.
func TestEventOrigin(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	mw := newMiddleware(t, newMemstore(t), "unit", &dedupwatermill.Options{Config: &dedup.Config{Observer: rec}})
	ps := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	t.Cleanup(func() { _ = ps.Close() })
	handled := newCounts(2)
	r := newRouter(t)
	for _, topic := range []string{"orders", "refunds"} {
		r.AddConsumerHandler("billing-"+topic, topic, ps, func(*message.Message) error { return nil }).
			AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc {
				return func(msg *message.Message) ([]*message.Message, error) {
					defer handled.add(topic) // once the middleware settled
					return h(msg)
				}
			}, mw.Middleware)
	}
	startRouter(t, r)
	for _, topic := range []string{"orders", "refunds"} {
		m := message.NewMessage("same-uuid", []byte("p"))
		m.Metadata.Set("traceparent", "00-abc")
		require.NoError(t, ps.Publish(topic, m))
	}
	handled.await(t, "both topics' handlers")
	ev := rec.all()
	require.Len(t, ev, 2, "one UUID on two topics runs twice (scoped by topic)")
	for _, e := range ev {
		require.Equal(t, dedupwatermill.BrokerWatermill, e.Broker)
		require.Contains(t, []string{"orders", "refunds"}, e.Source)
		require.Equal(t, "billing-"+e.Source, e.ConsumerGroup)
		require.Equal(t, "same-uuid", e.MessageID)
		v, ok := e.Header.Get("traceparent")
		require.True(t, ok)
		require.Equal(t, "00-abc", v)
		require.Equal(t, delivery.StatusProcessed, e.Status)
		require.Equal(t, delivery.Ack, e.Decision.Action)
		require.True(t, e.Stored)
		require.Equal(t, "unit:"+dedupwatermill.RecordID(e.Source, "same-uuid", 0), e.Key)
	}
}

func TestOptionsRefused(t *testing.T) {
	t.Parallel()
	_, err := dedupwatermill.New(nil, nil)
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)
	_, err = dedupwatermill.New(newMemstore(t), &dedupwatermill.Options{Config: &dedup.Config{Codec: dedup.JSONCodec{}}})
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)
	_, err = dedupwatermill.New(newMemstore(t), &dedupwatermill.Options{MaxHold: -1})
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)
}
