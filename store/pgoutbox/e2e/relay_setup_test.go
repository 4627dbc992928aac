package e2e_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/internal/testenv"
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

// keyed returns the n-th message of key, to a subject of o: body "key/n".
func (o outStream) keyed(key string, n int) pgoutbox.Message {
	return pgoutbox.Message{Destination: o.prefix + "events", OrderingKey: key, Body: fmt.Appendf(nil, "%s/%d", key, n)}
}

// jsPublisher returns the JetStream publisher of the tests.
func jsPublisher(t testing.TB, js jetstream.JetStream) *dedupnats.OutboxPublisher {
	t.Helper()
	p, err := dedupnats.NewOutboxPublisher(js, nil)
	require.NoError(t, err)
	return p
}
