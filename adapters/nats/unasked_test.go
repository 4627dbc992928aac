package dedupnats_test

import (
	"bytes"
	"context"
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
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

// TestConsumerDeletedIsAnError: a consumer whose JetStream consumer, or
// whose stream, is deleted while it runs stops, and Err says so (matching
// ErrStoppedUnasked and jetstream.ErrConsumerDeleted), logged at error
// level; a Stop someone asked for leaves Err nil.
func TestConsumerDeletedIsAnError(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		_, js := connect(t, url)
		for _, what := range []string{"consumer", "stream", "nothing: Stop"} {
			n := newNames()
			streams(t, js, n)
			cons := consumer(t, js, n, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 5})
			fx := newEffects()
			var logs syncBuffer
			c, err := dedupnats.NewConsumer(js, cons, okReceiver(t, fx, fastConfig("gone")),
				&dedupnats.Options{DeadLetterSubject: n.dlq, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			require.NoError(t, err)
			require.NoError(t, c.Start(t.Context()))
			stopAtCleanup(t, c)
			_, err = js.Publish(t.Context(), n.subject, orderJSON(t, Order{ID: "o-1"}))
			require.NoError(t, err)
			require.Eventually(t, func() bool { return fx.Len() == 1 }, 10*time.Second, 10*time.Millisecond)

			switch what {
			case "consumer":
				require.NoError(t, js.DeleteConsumer(t.Context(), n.stream, n.consumer))
			case "stream":
				require.NoError(t, js.DeleteStream(t.Context(), n.stream))
			default:
				require.NoError(t, c.Stop(t.Context()))
			}
			select {
			case <-c.Stopped():
			case <-time.After(20 * time.Second):
				t.Fatalf("%s deleted: the consumer did not stop", what)
			}
			if what == "nothing: Stop" {
				require.NoError(t, c.Err())
				require.NotContains(t, logs.String(), "level=ERROR")
				continue
			}
			require.ErrorIs(t, c.Err(), dedupnats.ErrStoppedUnasked, what)
			require.ErrorIs(t, c.Err(), jetstream.ErrConsumerDeleted, what)
			require.Contains(t, logs.String(), "level=ERROR msg=\"dedupnats: consumer stopped without Stop\"", what)
		}
	})
}

// TestSubscriberConnectionClosedIsAnError: a subscriber whose connection
// closes stops, and Err says so.
func TestSubscriberConnectionClosedIsAnError(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		nc, err := natsgo.Connect(url, natsgo.MaxReconnects(0))
		require.NoError(t, err)
		defer nc.Close()
		n := newNames()
		s, err := dedupnats.NewSubscriber(nc, n.subject, "", okReceiver(t, newEffects(), fastConfig("closed")), &dedupnats.Options{DropPoison: true})
		require.NoError(t, err)
		require.NoError(t, s.Start(t.Context()))
		require.NoError(t, s.Err())
		nc.Close()
		select {
		case <-s.Stopped():
		case <-time.After(20 * time.Second):
			t.Fatal("the subscriber did not stop")
		}
		require.ErrorIs(t, s.Err(), dedupnats.ErrStoppedUnasked)
		require.ErrorIs(t, s.Err(), natsgo.ErrConnectionClosed)
	})
}

// TestSlowSubscriberReportsDrops: 200 messages of 1 KiB against one
// blocked worker overflow the subscription's pending limits (10 messages);
// core NATS drops the excess. Every message is either handled or counted as
// dropped (and logged at error level), and the limits are the ones Options
// set. The server is the test's own and the data small, so that neither
// load on a shared server nor its speed decides the outcome: the client
// has every message before the worker moves. The handler honours its
// context, and the gate opens at cleanup whatever happened, so a failure
// fails, it does not hang.
func TestSlowSubscriberReportsDrops(t *testing.T) {
	t.Parallel()
	const msgs, size, pendingMsgs = 200, 1 << 10, 10
	url := embedded(t)
	nc, _ := connect(t, url)
	pub, _ := connect(t, url)
	n := newNames()
	var handled atomic.Int64
	gate := make(chan struct{})
	openGate := sync.OnceFunc(func() { close(gate) })
	store, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(store, idstrategy.MessageHeader[[]byte]("Seq"), func(ctx context.Context, m *dedup.Message[[]byte]) (struct{}, error) {
		select {
		case <-gate:
		case <-ctx.Done():
			return struct{}{}, ctx.Err()
		}
		handled.Add(1)
		return struct{}{}, nil
	}, fastConfig("slow"))
	require.NoError(t, err)
	var logs syncBuffer
	s, err := dedupnats.NewSubscriber(nc, n.subject, "", rcv, &dedupnats.Options{
		Concurrency: 1, Decoder: dedup.RawDecoder{}, DropPoison: true,
		PendingMsgsLimit: pendingMsgs, PendingBytesLimit: 1 << 20,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	require.NoError(t, err)
	require.NoError(t, s.Start(t.Context()))
	stopAtCleanup(t, s)
	t.Cleanup(openGate) // runs before the stop above: a failed test does not leave the worker blocked

	body := bytes.Repeat([]byte("x"), size)
	for i := range msgs {
		m := natsgo.NewMsg(n.subject)
		m.Data = body
		m.Header.Set("Seq", strconv.Itoa(i))
		require.NoError(t, pub.PublishMsg(m))
	}
	require.NoError(t, pub.Flush())
	// Everything has reached the subscriber's connection (the server
	// answers its PING after the messages) before the worker moves.
	require.NoError(t, nc.Flush())
	openGate()
	require.Eventually(t, func() bool {
		return handled.Load()+int64(s.Stats().SlowConsumerDropped) == msgs
	}, 10*time.Second, 10*time.Millisecond, "handled %d, dropped %d", handled.Load(), s.Stats().SlowConsumerDropped)
	require.Positive(t, s.Stats().SlowConsumerDropped, "nothing was dropped: the test proves nothing")
	require.Contains(t, logs.String(), "level=ERROR msg=\"dedupnats: slow consumer")
	require.Contains(t, logs.String(), "pending_msgs_limit=10")
}
