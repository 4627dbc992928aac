package e2e_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store/pgoutbox"
	"github.com/dedup-go/dedup/store/pgoutbox/internal/relaytest"
)

// recorder passes every call on to a real publisher and keeps a copy of
// each message it was handed, as it was handed. It also appends a byte
// to each body it is handed, as a careless publisher might: a relay that
// handed out bodies sharing one array, each with room past its end, would
// see the next message's body overwritten.
type recorder struct {
	pub outbox.AckPublisher

	mu   sync.Mutex
	seen map[string]outbox.Message // by id, the first copy
}

func (r *recorder) note(msgs []outbox.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		if _, ok := r.seen[m.ID]; !ok {
			c := m
			c.Body = append([]byte(nil), m.Body...)
			c.Header = maps.Clone(m.Header)
			r.seen[m.ID] = c
		}
	}
	for _, m := range msgs {
		_ = append(m.Body, '!')
	}
}

func (r *recorder) Publish(ctx context.Context, msgs []outbox.Message) error {
	r.note(msgs)
	return r.pub.Publish(ctx, msgs)
}

func (r *recorder) PublishEach(ctx context.Context, msgs []outbox.Message, ack func(int, error)) error {
	r.note(msgs)
	return r.pub.PublishEach(ctx, msgs, ack)
}

// TestRelayCarriesMessagesIntact: every message reaches the publisher as
// it was written: its id, destination, ordering key, body (of any length
// and any bytes, empty included) and headers, over several fetches of a
// small batch (so that rows held by the pump are read again and left
// out), with messages of many keys, of no key, and to three destinations.
func TestRelayCarriesMessagesIntact(t *testing.T) {
	t.Parallel()
	t.Run("PublishEach", func(t *testing.T) {
		t.Parallel()
		testIntact(t, func(r *recorder) outbox.Publisher { return r })
	})
	t.Run("Publish", func(t *testing.T) {
		t.Parallel()
		testIntact(t, func(r *recorder) outbox.Publisher { return onlyPublish{r} })
	})
}

// onlyPublish hides the recorder's PublishEach: the relay calls Publish.
type onlyPublish struct{ r *recorder }

func (o onlyPublish) Publish(ctx context.Context, msgs []outbox.Message) error {
	return o.r.Publish(ctx, msgs)
}

func testIntact(t *testing.T, as func(*recorder) outbox.Publisher) {
	db := relaytest.NewDB(t, 8)
	ob := db.Outbox(t, &pgoutbox.Options{Buckets: 4})
	_, js := natsConn(t, testenv.NATS.Addr(t))
	out := newOutStream(t, js, jetstream.MemoryStorage, 0)
	rec := &recorder{pub: jsPublisher(t, js), seen: map[string]outbox.Message{}}
	w := relaytest.Writer{DB: db, OB: ob}

	rng := rand.New(rand.NewPCG(26, 11))
	want := map[string]pgoutbox.Message{}
	const txs, perTx = 60, 10
	for j := range txs {
		var msgs []pgoutbox.Message
		for k := range perTx {
			m := pgoutbox.Message{
				Destination: out.prefix + "dest" + strconv.Itoa(rng.IntN(3)),
				Body:        make([]byte, rng.IntN(600)),
			}
			for i := range m.Body {
				m.Body[i] = byte(rng.IntN(256))
			}
			if (j+k)%7 != 0 {
				m.OrderingKey = "key-" + strconv.Itoa(rng.IntN(40))
			}
			if k%3 == 0 {
				m.Header = map[string]string{"Event-Type": "t" + strconv.Itoa(k), "Seq": fmt.Sprint(j, "-", k)}
			}
			msgs = append(msgs, m)
		}
		ids, err := w.Write(t.Context(), "order:intact-"+strconv.Itoa(j), msgs...)
		require.NoError(t, err)
		for i, id := range ids {
			want[id] = msgs[i]
		}
	}
	require.Len(t, want, txs*perTx)

	r := relaytest.NewRelay(t, ob, as(rec), &pgoutbox.RelayOptions{BatchSize: 32, Lease: 3 * time.Second, PollInterval: 50 * time.Millisecond})
	relaytest.Start(t, r)
	relaytest.WaitFor(t, testenv.WaitTimeout, "every message sent", func() bool { return db.Unsent(t) == 0 })

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.seen, len(want))
	for id, m := range want {
		got, ok := rec.seen[id]
		require.True(t, ok, "message %s never handed to the publisher", id)
		require.Equal(t, m.Destination, got.Destination, "message %s", id)
		require.Equal(t, m.OrderingKey, got.OrderingKey, "message %s", id)
		require.Equal(t, len(m.Body), len(got.Body), "message %s", id)
		require.Equal(t, m.Body, append([]byte{}, got.Body...), "message %s", id)
		if len(m.Header) == 0 {
			require.Empty(t, got.Header, "message %s", id)
		} else {
			require.Equal(t, m.Header, got.Header, "message %s", id)
		}
	}
	require.Equal(t, len(want), out.count(t), "the stream holds each message once")
}
