package dedupnats_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
)

// publishEach calls p.PublishEach and returns each message's report
// (absent: not reported) and its error.
func publishEach(ctx context.Context, p outbox.AckPublisher, msgs []outbox.Message) (map[int]error, error) {
	var mu sync.Mutex
	reports := map[int]error{}
	err := p.PublishEach(ctx, msgs, func(i int, err error) {
		mu.Lock()
		defer mu.Unlock()
		reports[i] = err
	})
	mu.Lock()
	defer mu.Unlock()
	return reports, err
}

// TestOutboxPublisherEachTooLarge: through PublishEach, a message over the
// server's max_payload or over its stream's max_msg_size is reported
// alone, refused for good; the others acknowledged.
func TestOutboxPublisherEachTooLarge(t *testing.T) {
	t.Parallel()
	nc, js := connect(t, testenv.NATS.Addr(t))
	n := newNames()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: n.stream, Subjects: []string{n.subject}, Storage: jetstream.MemoryStorage, MaxMsgSize: 1024})
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), n.stream) })
	p, err := dedupnats.NewOutboxPublisher(js, nil)
	require.NoError(t, err)
	reports, err := publishEach(ctx, p, []outbox.Message{
		{ID: "small", Destination: n.subject, Body: []byte("x")},
		{ID: "over-stream", Destination: n.subject, Body: make([]byte, 2048)},
		{ID: "over-server", Destination: n.subject, Body: make([]byte, nc.MaxPayload()+1)},
		{ID: "small-too", Destination: n.subject, Body: []byte("x")},
	})
	require.NoError(t, err)
	require.Len(t, reports, 4)
	require.NoError(t, reports[0])
	require.ErrorIs(t, reports[1], jetstream.ErrStreamMessageExceedsMaximum)
	require.ErrorIs(t, reports[1], outbox.ErrPermanent)
	require.ErrorIs(t, reports[2], natsgo.ErrMaxPayload)
	require.ErrorIs(t, reports[2], outbox.ErrPermanent)
	require.NoError(t, reports[3])
}

// TestOutboxPublisherEachExpectStream: ExpectStream, now a header of the
// publisher's own, still refuses a message stored by another stream (not
// for good), and lets through one stored by the stream named.
func TestOutboxPublisherEachExpectStream(t *testing.T) {
	t.Parallel()
	_, js := connect(t, testenv.NATS.Addr(t))
	n := newNames()
	streams(t, js, n)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	msgs := []outbox.Message{{ID: "a", Destination: n.subject, Body: []byte("x"), Header: map[string]string{"Nats-Msg-Id": "not the id"}}}
	wrong, err := dedupnats.NewOutboxPublisher(js, &dedupnats.OutboxOptions{ExpectStream: "NOT_" + n.stream})
	require.NoError(t, err)
	reports, err := publishEach(ctx, wrong, msgs)
	require.NoError(t, err)
	require.Error(t, reports[0], "stored by another stream than the one expected")
	require.NotErrorIs(t, reports[0], outbox.ErrPermanent)

	right, err := dedupnats.NewOutboxPublisher(js, &dedupnats.OutboxOptions{ExpectStream: n.stream})
	require.NoError(t, err)
	reports, err = publishEach(ctx, right, msgs)
	require.NoError(t, err)
	require.Equal(t, map[int]error{0: nil}, reports)
	got, err := readStream(ctx, js, n.stream, 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "a", got[0].ID, "the message's id, over a header of that name")
}

// TestOutboxPublisherEachServerDown: with the server gone and the
// connection reconnecting, PublishEach acknowledges nothing: what it
// does not report as failed (not for good) is left unreported at its
// context's end; once the server is back, the same publisher
// publishes again, each message reported.
func TestOutboxPublisherEachServerDown(t *testing.T) {
	t.Parallel()
	dir, port := t.TempDir(), testenv.FreePort(t)
	start := func() *server.Server {
		srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
		require.NoError(t, err)
		srv.Start()
		require.True(t, srv.ReadyForConnections(10*time.Second), "nats-server did not start")
		return srv
	}
	srv := start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	nc, err := natsgo.Connect(srv.ClientURL(), natsgo.MaxReconnects(-1), natsgo.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	n := newNames()
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: n.stream, Subjects: []string{n.subject}, Storage: jetstream.FileStorage})
	require.NoError(t, err)
	p, err := dedupnats.NewOutboxPublisher(js, nil)
	require.NoError(t, err)
	batch := func(round int) []outbox.Message {
		var msgs []outbox.Message
		for i := range 3 {
			msgs = append(msgs, outbox.Message{ID: fmt.Sprintf("%d-%d", round, i), Destination: n.subject, Body: []byte("x")})
		}
		return msgs
	}
	reports, err := publishEach(ctx, p, batch(0))
	require.NoError(t, err)
	require.Equal(t, map[int]error{0: nil, 1: nil, 2: nil}, reports)

	srv.Shutdown()
	srv.WaitForShutdown()
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelShort()
	reports, err = publishEach(short, p, batch(1))
	for i, err := range reports {
		// The client may refuse a publish while disconnected: a
		// failure, not for good.
		require.Error(t, err, "message %d acknowledged with the server down", i)
		require.NotErrorIs(t, err, outbox.ErrPermanent, "message %d", i)
	}
	if len(reports) < 3 {
		require.ErrorIs(t, err, context.DeadlineExceeded, "messages left unreported")
	}

	srv = start()
	require.Eventually(t, nc.IsConnected, testenv.WaitTimeout, 20*time.Millisecond, "reconnected")
	reports, err = publishEach(ctx, p, batch(2))
	require.NoError(t, err)
	require.Equal(t, map[int]error{0: nil, 1: nil, 2: nil}, reports)
}

// TestOutboxPublisherEachSilent: a message whose subject a subscriber
// holds without answering gets no PubAck: at the context's end,
// PublishEach returns its error with that message unreported, the one
// acknowledged before it reported.
func TestOutboxPublisherEachSilent(t *testing.T) {
	t.Parallel()
	nc, js := connect(t, testenv.NATS.Addr(t))
	n := newNames()
	streams(t, js, n)
	silent := "dedupt.silent." + suffix()
	sub, err := nc.SubscribeSync(silent)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, nc.Flush())
	p, err := dedupnats.NewOutboxPublisher(js, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	reports, err := publishEach(ctx, p, []outbox.Message{
		{ID: "stored", Destination: n.subject, Body: []byte("x")},
		{ID: "unanswered", Destination: silent, Body: []byte("x")},
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, map[int]error{0: nil}, reports, "the PubAck that came reported, the other not")
}
