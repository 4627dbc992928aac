package e2e_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store/pgoutbox"
	"github.com/dedup-go/dedup/store/pgoutbox/internal/relaytest"
)

// deadSetup writes key "k"'s messages 0 to 3 on JetStream, message 1 to
// a subject with a wildcard, which the publisher refuses for good, and
// key "free"'s 0 to 2.
func deadSetup(t *testing.T) (*relaytest.DB, *pgoutbox.Outbox, outStream, jetstream.JetStream, string) {
	db := relaytest.NewDB(t, 8)
	ob := db.Outbox(t, &pgoutbox.Options{Buckets: 2})
	_, js := natsConn(t, testenv.NATS.Addr(t))
	out := newOutStream(t, js, jetstream.MemoryStorage, 0)
	w := relaytest.Writer{DB: db, OB: ob}
	var refusedID string
	for n := range 4 {
		m := out.keyed("k", n)
		if n == 1 {
			m.Destination = out.prefix + "*.events"
		}
		ids, err := w.Write(t.Context(), fmt.Sprintf("order:k-%d", n), m)
		require.NoError(t, err)
		if n == 1 {
			refusedID = ids[0]
		}
	}
	for n := range 3 {
		_, err := w.Write(t.Context(), fmt.Sprintf("order:free-%d", n), out.keyed("free", n))
		require.NoError(t, err)
	}
	return db, ob, out, js, refusedID
}

// TestRelayDeadLetters: a message the broker refuses for good (here a
// subject with a wildcard, which no publish can have) is set aside in the
// dead table with its error, reported (EventDead with its id, Stats,
// no failed round, so no backoff), and the next messages of its key go
// on, in order.
func TestRelayDeadLetters(t *testing.T) {
	t.Parallel()
	db, ob, out, js, refusedID := deadSetup(t)
	ev := &relaytest.Events{}
	r := relaytest.NewRelay(t, ob, jsPublisher(t, js), &pgoutbox.RelayOptions{Lease: 3 * time.Second, PollInterval: 50 * time.Millisecond, Observer: ev})
	relaytest.Start(t, r)
	relaytest.WaitFor(t, testenv.WaitTimeout, "every message sent or dead", func() bool { return db.Unsent(t) == 0 })
	relaytest.WaitFor(t, testenv.WaitTimeout, "the dead counted", func() bool { return r.Stats().Dead == 1 })

	msgs := out.read(t)
	byKey := map[string][]string{}
	for _, m := range msgs {
		key, _, _ := strings.Cut(m.body, "/")
		byKey[key] = append(byKey[key], m.body)
	}
	require.Equal(t, []string{"k/0", "k/2", "k/3"}, byKey["k"], "the key went on past the refused message, in order")
	require.Equal(t, []string{"free/0", "free/1", "free/2"}, byKey["free"])
	require.Len(t, msgs, 6)

	dead := ev.Of(outbox.EventDead, "")
	require.Len(t, dead, 1)
	require.Equal(t, []string{refusedID}, dead[0].IDs)
	require.Equal(t, 1, dead[0].Messages)
	require.ErrorIs(t, dead[0].Err, outbox.ErrPermanent)
	require.Empty(t, ev.Of(outbox.EventFailed, ""), "a refusal for good is no failure: no backoff")

	var id, dest, errText string
	var body []byte
	require.NoError(t, db.Pool.QueryRow(t.Context(), "SELECT id, destination, body, error FROM "+db.Table("dedup_outbox_dead")).Scan(&id, &dest, &body, &errText))
	require.Equal(t, refusedID, id)
	require.Equal(t, out.prefix+"*.events", dest)
	require.Equal(t, "k/1", string(body))
	require.Contains(t, errText, "invalid subject")
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM "+db.Table("dedup_outbox_dead")))
	require.Equal(t, 7, db.Count(t, "SELECT count(*) FROM "+db.Table("dedup_outbox_ids")), "the dead message's id is kept like the others")

	// An operator sends it again, with the statement of the package
	// documentation: the broker refuses it again, and it is dead again.
	db.Exec(t, `WITH d AS (DELETE FROM `+db.Table("dedup_outbox_dead")+` WHERE id = $1 RETURNING *)
INSERT INTO `+db.Table("dedup_outbox")+` (id, claim_key, name, destination, ordering_key, key_hash, body, headers)
SELECT id, claim_key, name, destination, ordering_key, key_hash, body, headers FROM d`, refusedID)
	relaytest.WaitFor(t, testenv.WaitTimeout, "the message sent again, and refused again", func() bool { return r.Stats().Dead == 2 })
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM "+db.Table("dedup_outbox_dead")))
	require.Zero(t, db.Unsent(t))
}

// TestRelayHoldRefused: with RelayOptions.HoldRefused, a message refused
// for good holds back its key, round after round, like any failure; the
// other keys go on.
func TestRelayHoldRefused(t *testing.T) {
	t.Parallel()
	db, ob, out, js, _ := deadSetup(t)
	ev := &relaytest.Events{}
	r := relaytest.NewRelay(t, ob, jsPublisher(t, js), &pgoutbox.RelayOptions{HoldRefused: true, Lease: 3 * time.Second, PollInterval: 50 * time.Millisecond,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Observer: ev})
	relaytest.Start(t, r)
	relaytest.WaitFor(t, testenv.WaitTimeout, "three failed rounds", func() bool { return len(ev.Of(outbox.EventFailed, "publish")) >= 3 })
	for _, e := range ev.Of(outbox.EventFailed, "publish")[:3] {
		require.Equal(t, 3, e.Messages, "the refused message and the two behind it")
		require.ErrorIs(t, e.Err, outbox.ErrPermanent)
	}
	requireKeyOrder(t, out.read(t), map[string]int{"free": 3, "k": 1})
	require.Equal(t, 3, db.Unsent(t))
	require.Zero(t, db.Count(t, "SELECT count(*) FROM "+db.Table("dedup_outbox_dead")))
	require.Zero(t, r.Stats().Dead)
	require.Empty(t, ev.Of(outbox.EventDead, ""))
}
