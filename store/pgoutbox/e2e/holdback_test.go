package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store/pgoutbox"
	"github.com/dedup-go/dedup/store/pgoutbox/internal/relaytest"
)

// TestRelayHoldsKeyBehindRefused: a message the broker refuses (its
// subject captured by no stream) holds back the later messages of its
// ordering key, round after round, but not the messages of other keys;
// once a stream captures its subject, it goes out, then the rest of its
// key, in order.
func TestRelayHoldsKeyBehindRefused(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 8)
	ob := db.Outbox(t, &pgoutbox.Options{Buckets: 1})
	_, js := natsConn(t, testenv.NATS.Addr(t))
	out := newOutStream(t, js, jetstream.MemoryStorage, 0)
	ev := &relaytest.Events{}
	r := relaytest.NewRelay(t, ob, jsPublisher(t, js), &pgoutbox.RelayOptions{Lease: 3 * time.Second, PollInterval: 50 * time.Millisecond,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Observer: ev})
	w := relaytest.Writer{DB: db, OB: ob}
	lost := "pgoutbox.unrouted." + suffix()
	first := out.keyed("held", 0)
	first.Destination = lost + ".events"
	_, err := w.Write(t.Context(), "order:held-0", first)
	require.NoError(t, err)
	for n := 1; n < 4; n++ {
		_, err := w.Write(t.Context(), "order:held-"+string(rune('0'+n)), out.keyed("held", n))
		require.NoError(t, err)
	}
	for n := range 3 {
		_, err := w.Write(t.Context(), "order:free-"+string(rune('0'+n)), out.keyed("free", n))
		require.NoError(t, err)
	}
	relaytest.Start(t, r)

	relaytest.WaitFor(t, testenv.WaitTimeout, "three failed rounds", func() bool { return len(ev.Of(outbox.EventFailed, "publish")) >= 3 })
	msgs := out.read(t)
	requireKeyOrder(t, msgs, map[string]int{"free": 3})
	for _, e := range ev.Of(outbox.EventFailed, "publish")[:3] {
		require.Equal(t, 4, e.Messages, "the refused message and the three behind it")
	}

	// An operator makes a stream capture the subject.
	fixed := "PGOUTBOX_UNROUTED_" + suffix()
	_, err = js.CreateStream(t.Context(), jetstream.StreamConfig{Name: fixed, Subjects: []string{lost + ".>"}, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), fixed) })
	relaytest.WaitFor(t, testenv.WaitTimeout, "every message sent", func() bool { return db.Unsent(t) == 0 })
	msgs = out.read(t)
	held := 0
	for _, m := range firstOccurrences(msgs) {
		if m.body[:4] == "held" {
			held++
			require.Equal(t, "held/"+string(rune('0'+held)), m.body, "after the refused one, in order")
		}
	}
	require.Equal(t, 3, held)
}
