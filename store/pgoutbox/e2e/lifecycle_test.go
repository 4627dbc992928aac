package e2e_test

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
	"github.com/dedup-go/dedup/store/pgoutbox/internal/relaytest"
)

// TestRelayStop: Stop gives every bucket back and ends the relay's
// presence, so another relay takes them at once; a relay starts once,
// and stops only after it started.
func TestRelayStop(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 8)
	ob := db.Outbox(t, &pgoutbox.Options{Buckets: 4})
	_, js := natsConn(t, testenv.NATS.Addr(t))
	pub := jsPublisher(t, js)
	r := relaytest.NewRelay(t, ob, pub, &pgoutbox.RelayOptions{Lease: time.Minute})
	require.ErrorIs(t, r.Stop(t.Context()), pgoutbox.ErrNotStarted)
	require.NoError(t, r.Start(t.Context()))
	require.ErrorIs(t, r.Start(t.Context()), pgoutbox.ErrStarted)
	relaytest.WaitFor(t, testenv.WaitTimeout, "the relay to take every bucket", func() bool { return r.Stats().Buckets == 4 })
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM "+db.Table("dedup_outbox_relays")))

	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	require.NoError(t, r.Stop(ctx))
	testenv.Recv(t, r.Stopped(), "Stopped")
	require.NoError(t, r.Err())
	require.NoError(t, r.Stop(ctx), "a second Stop")
	require.Zero(t, db.Count(t, "SELECT count(*) FROM "+db.Table("dedup_outbox_leases")+" WHERE owner IS NOT NULL"), "leases given back")
	require.Zero(t, db.Count(t, "SELECT count(*) FROM "+db.Table("dedup_outbox_relays")), "presence ended")

	// A lease of a minute, given back: the next relay holds it at once.
	next := relaytest.NewRelay(t, ob, pub, &pgoutbox.RelayOptions{Lease: time.Minute})
	relaytest.Start(t, next)
	relaytest.WaitFor(t, testenv.WaitTimeout, "the next relay to take every bucket", func() bool { return next.Stats().Buckets == 4 })
}

// TestRelayStoppedUnasked: Start's context ending is a stop nobody asked
// for, which Err reports.
func TestRelayStoppedUnasked(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 4)
	ob := db.Outbox(t, nil)
	_, js := natsConn(t, testenv.NATS.Addr(t))
	r := relaytest.NewRelay(t, ob, jsPublisher(t, js), nil)
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
	db := relaytest.NewDB(t, 2)
	ob := db.Outbox(t, nil)
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
	db := relaytest.NewDB(t, 8)
	ob := db.Outbox(t, &pgoutbox.Options{Buckets: 2})
	_, js := natsConn(t, testenv.NATS.Addr(t))
	out := newOutStream(t, js, jetstream.MemoryStorage, 0)
	ev := &relaytest.Events{}
	r := relaytest.NewRelay(t, ob, jsPublisher(t, js), &pgoutbox.RelayOptions{PollInterval: time.Hour, Lease: time.Hour, Observer: ev})
	relaytest.Start(t, r)
	relaytest.WaitFor(t, testenv.WaitTimeout, "the relay to take every bucket", func() bool { return r.Stats().Buckets == 2 })
	w := relaytest.Writer{DB: db, OB: ob}
	for n := range 3 {
		_, err := w.Write(t.Context(), "order:"+string(rune('a'+n)), out.keyed("k", n))
		require.NoError(t, err)
		relaytest.WaitFor(t, 10*time.Second, "the message published", func() bool { return out.count(t) == n+1 })
	}
	require.Empty(t, ev.Of(outbox.EventFailed, ""))
}

// TestRelayCleanup: the ids of sent messages past the retention are
// deleted (the messages were when marked sent), those of unsent ones
// never. Notifications are off: the relay polls.
func TestRelayCleanup(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 8)
	ob := db.Outbox(t, &pgoutbox.Options{Buckets: 2, NoNotify: true}) // polling alone
	_, js := natsConn(t, testenv.NATS.Addr(t))
	out := newOutStream(t, js, jetstream.MemoryStorage, 0)
	w := relaytest.Writer{DB: db, OB: ob}
	for n := range 5 {
		_, err := w.Write(t.Context(), "order:"+string(rune('a'+n)), out.keyed("k", n))
		require.NoError(t, err)
	}
	unroutable := out.keyed("stuck", 0)
	unroutable.Destination = "pgoutbox.nostream." + suffix()
	_, err := w.Write(t.Context(), "order:stuck", unroutable)
	require.NoError(t, err)

	ev := &relaytest.Events{}
	r := relaytest.NewRelay(t, ob, jsPublisher(t, js), &pgoutbox.RelayOptions{PollInterval: 50 * time.Millisecond, Lease: 3 * time.Second,
		Retention: time.Millisecond, CleanupInterval: 100 * time.Millisecond, CleanupBatch: 2, MaxBackoff: 200 * time.Millisecond, Observer: ev})
	relaytest.Start(t, r)
	reported := func() int {
		n := 0
		for _, e := range ev.Of(outbox.EventCleaned, "") {
			n += e.Messages
		}
		return n
	}
	// The relay counts and reports what a cleanup deleted once its
	// statements returned, after their commit: the count and the events
	// are waited for too, not read the moment the table shows the
	// deletion.
	relaytest.WaitFor(t, testenv.WaitTimeout, "the sent messages' ids deleted, counted and reported", func() bool {
		return db.Count(t, "SELECT count(*) FROM "+db.Table("dedup_outbox_ids")) <= 1 && r.Stats().Cleaned >= 5 && reported() >= 5
	})
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM "+db.Table("dedup_outbox_ids")), "the unsent message's id stays")
	require.Equal(t, 1, db.Unsent(t), "the unsent message stays")
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM "+db.Table("dedup_outbox")), "sent messages are deleted when marked")
	require.Equal(t, 5, out.count(t))
	require.Equal(t, uint64(5), r.Stats().Cleaned)
	require.Equal(t, 5, reported())
}
