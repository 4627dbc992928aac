package pgoutbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/internal/adaptertest"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/pgoutbox"
)

// suffix returns a random name part, so tests on a shared server never
// see each other's streams.
func suffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return strings.ToUpper(hex.EncodeToString(b))
}

// natsConn connects to url, reconnecting for ever (a test's own server
// is restarted), closed when t ends.
func natsConn(t testing.TB, url string) (*natsgo.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := natsgo.Connect(url, natsgo.MaxReconnects(-1), natsgo.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1<<14))
	require.NoError(t, err)
	return nc, js
}

// outStream is a stream that captures the relay's destinations.
type outStream struct {
	name, prefix string // the subjects are prefix + anything
	js           jetstream.JetStream
}

// newOutStream creates a stream capturing prefix.>, with a duplicate
// window of dupWindow (0: the server's default, 2 minutes), deleted
// when t ends.
func newOutStream(t testing.TB, js jetstream.JetStream, storage jetstream.StorageType, dupWindow time.Duration) outStream {
	t.Helper()
	s := suffix()
	o := outStream{name: "PGOUTBOX_" + s, prefix: "pgoutbox." + s + ".", js: js}
	_, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: o.name, Subjects: []string{o.prefix + ">"}, Storage: storage, Duplicates: dupWindow})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, o.name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) && !errors.Is(err, natsgo.ErrConnectionClosed) {
			t.Logf("delete stream %s: %v", o.name, err)
		}
	})
	return o
}

// stored is a message as the stream holds it.
type stored struct {
	seq  uint64
	id   string
	subj string
	body string
}

// read returns every message of the stream, in order.
func (o outStream) read(t testing.TB) []stored {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	s, err := o.js.Stream(ctx, o.name)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	if info.State.Msgs == 0 {
		return nil
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	var out []stored
	for uint64(len(out)) < info.State.Msgs {
		batch, err := c.Fetch(int(info.State.Msgs)-len(out), jetstream.FetchMaxWait(2*time.Second))
		require.NoError(t, err)
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			require.NoError(t, err)
			out = append(out, stored{seq: meta.Sequence.Stream, id: m.Headers().Get("Nats-Msg-Id"), subj: m.Subject(), body: string(m.Data())})
		}
		require.NoError(t, batch.Error())
		require.NoError(t, ctx.Err(), "reading the stream")
	}
	return out
}

// count returns how many messages the stream holds.
func (o outStream) count(t testing.TB) int {
	t.Helper()
	s, err := o.js.Stream(t.Context(), o.name)
	require.NoError(t, err)
	info, err := s.Info(t.Context())
	require.NoError(t, err)
	return int(info.State.Msgs)
}

// firstOccurrences returns, of each id, the first copy, in stream order.
func firstOccurrences(msgs []stored) []stored {
	seen := map[string]bool{}
	var out []stored
	for _, m := range msgs {
		if !seen[m.id] {
			seen[m.id] = true
			out = append(out, m)
		}
	}
	return out
}

// requireKeyOrder checks that the first copies of each key's messages
// (bodies "key/n") are in the order n, and that all of want are there.
func requireKeyOrder(t testing.TB, msgs []stored, want map[string]int) {
	t.Helper()
	next := map[string]int{}
	for _, m := range firstOccurrences(msgs) {
		key, n, ok := strings.Cut(m.body, "/")
		require.True(t, ok, "body %q", m.body)
		i, err := strconv.Atoi(n)
		require.NoError(t, err)
		require.Equal(t, next[key], i, "key %s: message %d came before %d (stream seq %d)", key, i, next[key], m.seq)
		next[key]++
	}
	require.Equal(t, want, next, "messages per key")
}

// writer writes messages into an outbox as handlers would: each call one
// transaction, under a claim of its own.
type writer struct {
	db *testDB
	ob *pgoutbox.Outbox
}

// write commits one transaction holding msgs, under the claim of key.
func (w writer) write(ctx context.Context, key string, msgs ...pgoutbox.Message) ([]string, error) {
	ctx = store.ContextWithClaim(ctx, &store.HeldClaim{Key: key, Attempt: 1})
	tx, err := w.db.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	wr, err := w.ob.Writer(ctx, tx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, m := range msgs {
		id, err := wr.Add(ctx, m)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, tx.Commit(ctx)
}

// keyed returns the n-th message of key, to a subject of o: body "key/n".
func (o outStream) keyed(key string, n int) pgoutbox.Message {
	return pgoutbox.Message{Destination: o.prefix + "events", OrderingKey: key, Body: fmt.Appendf(nil, "%s/%d", key, n)}
}

// newRelay returns a relay on ob publishing to js, stopped (bounded) when
// t ends.
func newRelay(t testing.TB, ob *pgoutbox.Outbox, pub outbox.Publisher, opts *pgoutbox.RelayOptions) *pgoutbox.Relay {
	t.Helper()
	r, err := pgoutbox.NewRelay(ob, pub, opts)
	require.NoError(t, err)
	return r
}

// start starts r on the test's context and stops it when t ends.
func start(t testing.TB, r *pgoutbox.Relay) {
	t.Helper()
	require.NoError(t, r.Start(context.WithoutCancel(t.Context())))
	adaptertest.StopAtCleanup(t, r)
}

// jsPublisher returns the JetStream publisher of the tests.
func jsPublisher(t testing.TB, js jetstream.JetStream) *dedupnats.OutboxPublisher {
	t.Helper()
	p, err := dedupnats.NewOutboxPublisher(js, nil)
	require.NoError(t, err)
	return p
}

// events records a relay's events, and when each came.
type events struct {
	mu  sync.Mutex
	all []outbox.Event
	at  []time.Time
}

func (e *events) Observe(_ context.Context, ev outbox.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
	e.at = append(e.at, time.Now())
}

// timed returns the events of kind k (of op, when op is set), and when
// each came.
func (e *events) timed(k outbox.EventKind, op string) ([]outbox.Event, []time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []outbox.Event
	var at []time.Time
	for i, ev := range e.all {
		if ev.Kind == k && (op == "" || ev.Op == op) {
			out = append(out, ev)
			at = append(at, e.at[i])
		}
	}
	return out, at
}

// of returns the events of kind k (of op, for failures, when op is set).
func (e *events) of(k outbox.EventKind, op string) []outbox.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []outbox.Event
	for _, ev := range e.all {
		if ev.Kind == k && (op == "" || ev.Op == op) {
			out = append(out, ev)
		}
	}
	return out
}

// waitFor polls cond every 20ms until it holds, failing t after within.
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// unsent counts the outbox's unsent messages.
func (db *testDB) unsent(t testing.TB) int {
	return db.count(t, "SELECT count(*) FROM "+db.table("dedup_outbox")+" WHERE sent_at IS NULL")
}

// isPermanent reports a refusal for good.
func isPermanent(err error) bool { return errors.Is(err, outbox.ErrPermanent) }

// publisherFunc adapts a function to outbox.Publisher.
type publisherFunc func(ctx context.Context, msgs []outbox.Message) error

func (f publisherFunc) Publish(ctx context.Context, msgs []outbox.Message) error { return f(ctx, msgs) }
