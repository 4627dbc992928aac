package pgoutbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store/pgoutbox"
)

// TestRelayStop: Stop gives every bucket back and ends the relay's
// presence, so another relay takes them at once; a relay starts once,
// and stops only after it started.
func TestRelayStop(t *testing.T) {
	t.Parallel()
	db := newDB(t, 8)
	ob := db.outbox(t, &pgoutbox.Options{Buckets: 4})
	_, js := natsConn(t, testenv.NATS.Addr(t))
	pub := jsPublisher(t, js)
	r := newRelay(t, ob, pub, &pgoutbox.RelayOptions{Lease: time.Minute})
	require.ErrorIs(t, r.Stop(t.Context()), pgoutbox.ErrNotStarted)
	require.NoError(t, r.Start(t.Context()))
	require.ErrorIs(t, r.Start(t.Context()), pgoutbox.ErrStarted)
	waitFor(t, testenv.WaitTimeout, "the relay to take every bucket", func() bool { return r.Stats().Buckets == 4 })
	require.Equal(t, 1, db.count(t, "SELECT count(*) FROM "+db.table("dedup_outbox_relays")))

	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	require.NoError(t, r.Stop(ctx))
	testenv.Recv(t, r.Stopped(), "Stopped")
	require.NoError(t, r.Err())
	require.NoError(t, r.Stop(ctx), "a second Stop")
	require.Zero(t, db.count(t, "SELECT count(*) FROM "+db.table("dedup_outbox_leases")+" WHERE owner IS NOT NULL"), "leases given back")
	require.Zero(t, db.count(t, "SELECT count(*) FROM "+db.table("dedup_outbox_relays")), "presence ended")

	// A lease of a minute, given back: the next relay holds it at once.
	next := newRelay(t, ob, pub, &pgoutbox.RelayOptions{Lease: time.Minute})
	start(t, next)
	waitFor(t, testenv.WaitTimeout, "the next relay to take every bucket", func() bool { return next.Stats().Buckets == 4 })
}

// TestRelayStoppedUnasked: Start's context ending is a stop nobody asked
// for, which Err reports.
func TestRelayStoppedUnasked(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	ob := db.outbox(t, nil)
	_, js := natsConn(t, testenv.NATS.Addr(t))
	r := newRelay(t, ob, jsPublisher(t, js), nil)
	ctx, cancel := context.WithCancel(t.Context())
	require.NoError(t, r.Start(ctx))
	cancel()
	testenv.Recv(t, r.Stopped(), "Stopped")
	require.ErrorIs(t, r.Err(), pgoutbox.ErrStoppedUnasked)
	require.ErrorIs(t, r.Err(), context.Canceled)
}

// TestRelayOptions: out-of-range options are refused.
func TestRelayOptions(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	ob := db.outbox(t, nil)
	_, js := natsConn(t, testenv.NATS.Addr(t))
	pub := jsPublisher(t, js)
	for _, o := range []*pgoutbox.RelayOptions{
		{BatchSize: -1}, {Lease: -time.Second}, {Lease: 3 * time.Second, PublishTimeout: 2 * time.Second},
		{MinBackoff: time.Second, MaxBackoff: time.Millisecond}, {Retention: -1},
	} {
		_, err := pgoutbox.NewRelay(ob, pub, o)
		require.ErrorIs(t, err, dedup.ErrInvalidConfig, "%+v", o)
	}
	_, err := pgoutbox.NewRelay(nil, pub, nil)
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)
	_, err = pgoutbox.NewRelay(ob, nil, nil)
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)
}

// TestRelayNotified: with a poll interval of an hour, a message written
// while the relay waits goes out all the same: the NOTIFY sent at its
// commit woke the relay.
func TestRelayNotified(t *testing.T) {
	t.Parallel()
	db := newDB(t, 8)
	ob := db.outbox(t, &pgoutbox.Options{Buckets: 2})
	_, js := natsConn(t, testenv.NATS.Addr(t))
	out := newOutStream(t, js, jetstream.MemoryStorage, 0)
	ev := &events{}
	r := newRelay(t, ob, jsPublisher(t, js), &pgoutbox.RelayOptions{PollInterval: time.Hour, Lease: time.Hour, Observer: ev})
	start(t, r)
	waitFor(t, testenv.WaitTimeout, "the relay to take every bucket", func() bool { return r.Stats().Buckets == 2 })
	w := writer{db: db, ob: ob}
	for n := range 3 {
		_, err := w.write(t.Context(), "order:"+string(rune('a'+n)), out.keyed("k", n))
		require.NoError(t, err)
		waitFor(t, 10*time.Second, "the message published", func() bool { return out.count(t) == n+1 })
	}
	require.Empty(t, ev.of(outbox.EventFailed, ""))
}

// TestRelayCleanup: the ids of sent messages past the retention are
// deleted (the messages were when marked sent), those of unsent ones
// never. Notifications are off: the relay polls.
func TestRelayCleanup(t *testing.T) {
	t.Parallel()
	db := newDB(t, 8)
	ob := db.outbox(t, &pgoutbox.Options{Buckets: 2, NoNotify: true}) // polling alone
	_, js := natsConn(t, testenv.NATS.Addr(t))
	out := newOutStream(t, js, jetstream.MemoryStorage, 0)
	w := writer{db: db, ob: ob}
	for n := range 5 {
		_, err := w.write(t.Context(), "order:"+string(rune('a'+n)), out.keyed("k", n))
		require.NoError(t, err)
	}
	unroutable := out.keyed("stuck", 0)
	unroutable.Destination = "pgoutbox.nostream." + suffix()
	_, err := w.write(t.Context(), "order:stuck", unroutable)
	require.NoError(t, err)

	ev := &events{}
	r := newRelay(t, ob, jsPublisher(t, js), &pgoutbox.RelayOptions{PollInterval: 50 * time.Millisecond, Lease: 3 * time.Second,
		Retention: time.Millisecond, CleanupInterval: 100 * time.Millisecond, CleanupBatch: 2, MaxBackoff: 200 * time.Millisecond, Observer: ev})
	start(t, r)
	reported := func() int {
		n := 0
		for _, e := range ev.of(outbox.EventCleaned, "") {
			n += e.Messages
		}
		return n
	}
	// The relay counts and reports what a cleanup deleted once its
	// statements returned, after their commit: the count and the events
	// are waited for too, not read the moment the table shows the
	// deletion.
	waitFor(t, testenv.WaitTimeout, "the sent messages' ids deleted, counted and reported", func() bool {
		return db.count(t, "SELECT count(*) FROM "+db.table("dedup_outbox_ids")) <= 1 && r.Stats().Cleaned >= 5 && reported() >= 5
	})
	require.Equal(t, 1, db.count(t, "SELECT count(*) FROM "+db.table("dedup_outbox_ids")), "the unsent message's id stays")
	require.Equal(t, 1, db.unsent(t), "the unsent message stays")
	require.Equal(t, 1, db.count(t, "SELECT count(*) FROM "+db.table("dedup_outbox")), "sent messages are deleted when marked")
	require.Equal(t, 5, out.count(t))
	require.Equal(t, uint64(5), r.Stats().Cleaned)
	require.Equal(t, 5, reported())
}
