package redrive_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/internal/testenv"
)

// suffix returns a random name part, so that tests on a shared server
// never see each other's streams, queues and topics.
func suffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return strings.ToUpper(hex.EncodeToString(b))
}

// natsEnv is one test's JetStream: a stream of orders, its dead-letter
// stream, a durable consumer of the orders, and a store.
type natsEnv struct {
	url                             string
	nc                              *natsgo.Conn
	js                              jetstream.JetStream
	stream, subject, dlqStream, dlq string
	consumer                        string
	st                              testStore
	ns                              string
}

// newNATSEnv creates the test's streams (in memory; deleted at cleanup).
// cfg, when given, changes the orders stream's configuration.
func newNATSEnv(t testing.TB, cfg ...func(*jetstream.StreamConfig)) *natsEnv {
	t.Helper()
	url := testenv.NATS.Addr(t)
	nc, err := natsgo.Connect(url, natsgo.MaxReconnects(0))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1<<14))
	require.NoError(t, err)
	s := suffix()
	e := &natsEnv{
		url: url, nc: nc, js: js,
		stream: "REDRIVE_" + s, subject: "redrive." + s + ".orders",
		dlqStream: "REDRIVE_" + s + "_DLQ", dlq: "redrive." + s + ".dlq",
		consumer: "worker_" + s, st: newStore(t), ns: "orders",
	}
	// The .probe subject is the tests' own, to learn when the stream's
	// duplicate window passed; the consumer does not read it.
	orders := jetstream.StreamConfig{Name: e.stream, Subjects: []string{e.subject, e.subject + ".probe"}, Storage: jetstream.MemoryStorage}
	for _, f := range cfg {
		f(&orders)
	}
	e.createStream(t, orders)
	// The .other subject holds letters of another consumer's, for --subject.
	e.createStream(t, jetstream.StreamConfig{Name: e.dlqStream, Subjects: []string{e.dlq, e.dlq + ".other"}, Storage: jetstream.MemoryStorage})
	return e
}

func (e *natsEnv) createStream(t testing.TB, cfg jetstream.StreamConfig) {
	t.Helper()
	_, err := e.js.CreateStream(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := e.js.DeleteStream(ctx, cfg.Name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Logf("delete stream %s: %v", cfg.Name, err)
		}
	})
}

// args are the tool's arguments to redrive the test's dead letters.
func (e *natsEnv) args(extra ...string) []string {
	args := append([]string{"redrive", "nats", "--nats", e.url, "--stream", e.dlqStream}, e.st.flags...)
	return append(args, extra...)
}

// publish publishes each order on the orders subject; hdr, when given,
// sets headers of each message.
func (e *natsEnv) publish(t testing.TB, orders []Order, hdr func(i int, h natsgo.Header)) {
	t.Helper()
	for i, o := range orders {
		m := natsgo.NewMsg(e.subject)
		m.Data = orderJSON(t, o)
		if hdr != nil {
			hdr(i, m.Header)
		}
		_, err := e.js.PublishMsgAsync(m)
		require.NoError(t, err)
	}
	select {
	case <-e.js.PublishAsyncComplete():
	case <-time.After(testenv.WaitTimeout):
		t.Fatal("publishes not acknowledged")
	}
}

// publishData publishes raw data on the orders subject.
func (e *natsEnv) publishData(t testing.TB, data []byte, hdr natsgo.Header) {
	t.Helper()
	m := natsgo.NewMsg(e.subject)
	m.Data = data
	for k, vs := range hdr {
		m.Header[k] = vs
	}
	_, err := e.js.PublishMsg(t.Context(), m)
	require.NoError(t, err)
}

// consume runs rcv over the orders stream with the adapter until the
// returned stop is called (or the test ends). Its durable consumer is the
// same across calls: a later one goes on where an earlier one stopped.
func (e *natsEnv) consume(t testing.TB, rcv *dedup.Receiver[*dedup.Message[Order], string], fingerprint bool) (stop func()) {
	t.Helper()
	cons, err := e.js.CreateOrUpdateConsumer(t.Context(), e.stream, jetstream.ConsumerConfig{
		Durable: e.consumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, FilterSubject: e.subject,
	})
	require.NoError(t, err)
	c, err := dedupnats.NewConsumer(e.js, cons, rcv, &dedupnats.Options{
		DeadLetterSubject: e.dlq, Concurrency: 16, Fingerprint: fingerprint,
	})
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
		defer cancel()
		require.NoError(t, c.Stop(ctx))
		testenv.Recv(t, c.Stopped(), "the consumer to stop")
	}
	t.Cleanup(stop)
	return stop
}

// settled waits until the orders consumer has nothing pending or
// unacknowledged.
func (e *natsEnv) settled(t testing.TB) {
	t.Helper()
	cons, err := e.js.Consumer(t.Context(), e.stream, e.consumer)
	require.NoError(t, err)
	eventually(t, testenv.WaitTimeout, "the orders consumer to settle", func() bool {
		info, err := cons.Info(t.Context())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
}

// count returns how many messages a stream holds.
func (e *natsEnv) count(t testing.TB, stream string) uint64 {
	t.Helper()
	s, err := e.js.Stream(t.Context(), stream)
	require.NoError(t, err)
	info, err := s.Info(t.Context())
	require.NoError(t, err)
	return info.State.Msgs
}

// waitDLQ waits until the dead-letter stream holds n letters.
func (e *natsEnv) waitDLQ(t testing.TB, n uint64) {
	t.Helper()
	eventually(t, testenv.WaitTimeout, "the dead letters", func() bool { return e.count(t, e.dlqStream) >= n })
	require.Equal(t, n, e.count(t, e.dlqStream))
}

// deadLetter publishes the orders and has a broken handler fail each one,
// so that the adapter dead-letters them all (attempts-exhausted, with a
// failed record each).
func (e *natsEnv) deadLetter(t testing.TB, orders []Order) {
	t.Helper()
	before := e.count(t, e.dlqStream)
	e.publish(t, orders, nil)
	stop := e.consume(t, brokenReceiver(t, e.st, e.ns), false)
	e.waitDLQ(t, before+uint64(len(orders)))
	e.settled(t)
	stop()
}

// publishLetter publishes a dead letter of the test's own making.
func (e *natsEnv) publishLetter(t testing.TB, data []byte, hdr natsgo.Header) {
	t.Helper()
	e.publishLetterOn(t, e.dlq, data, hdr)
}

// publishLetterOn publishes a dead letter on subject.
func (e *natsEnv) publishLetterOn(t testing.TB, subject string, data []byte, hdr natsgo.Header) {
	t.Helper()
	m := natsgo.NewMsg(subject)
	m.Data = data
	for k, vs := range hdr {
		m.Header[k] = vs
	}
	_, err := e.js.PublishMsg(t.Context(), m)
	require.NoError(t, err)
}

func orders(ids ...string) []Order {
	out := make([]Order, len(ids))
	for i, id := range ids {
		out[i] = Order{ID: id, Cents: 100 + i}
	}
	return out
}

// probe publishes a message with Nats-Msg-Id id on the probe subject of
// the orders stream, and reports whether the stream stored it (false: a
// duplicate within the window).
func (e *natsEnv) probe(t testing.TB, id string) bool {
	t.Helper()
	m := natsgo.NewMsg(e.subject + ".probe")
	m.Header.Set(jetstream.MsgIDHeader, id)
	ack, err := e.js.PublishMsg(t.Context(), m)
	require.NoError(t, err)
	return !ack.Duplicate
}

// waitWindow waits until the orders stream's duplicate window forgot id,
// published by probe after the messages whose ids must be forgotten: the
// stream forgets ids in the order it saw them.
func (e *natsEnv) waitWindow(t testing.TB, id string) {
	t.Helper()
	eventually(t, 10*time.Second, "the duplicate window to pass", func() bool { return e.probe(t, id) })
}
