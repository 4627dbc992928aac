package pgoutbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store/pgoutbox"
	"github.com/dedup-go/dedup/store/pgoutbox/internal/relaytest"
)

// TestRelayBackoffAcrossRenewal: the backoff doubles with each failure in
// a row, and a round that the renewal of the relay's leases cuts short
// before it handed anything to the publisher is not a success that
// starts it again. Here the broker is down for good, and the round's
// fetch waits (a lock on the outbox) until the renewal is overdue.
func TestRelayBackoffAcrossRenewal(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 8)
	ob := db.Outbox(t, &pgoutbox.Options{Buckets: 1})
	relaytest.WriteKeyed(t, relaytest.Writer{DB: db, OB: ob}, relaytest.KeysN(4), 5, func(string, int) string { return "orders.events" })
	down := publisherFunc(func(ctx context.Context, _ []outbox.Message) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return errors.New("the broker is down")
	})
	ev := &relaytest.Events{}
	const lease, maxBackoff = 3 * time.Second, 160 * time.Millisecond
	r := relaytest.NewRelay(t, ob, down, &pgoutbox.RelayOptions{Lease: lease, PollInterval: 50 * time.Millisecond,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: maxBackoff, Observer: ev})
	relaytest.Start(t, r)
	failures := func() []outbox.Event { return ev.Of(outbox.EventFailed, "publish") }
	relaytest.WaitFor(t, testenv.WaitTimeout, "three failed rounds", func() bool { return len(failures()) >= 3 })

	// A round's fetch waits for the lock; it is released once the
	// renewal the round stops at is overdue (a third of the lease since
	// the last, and half a second more for the round to see it).
	table := db.Table("dedup_outbox")
	tx, err := db.Pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(t.Context(), "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	relaytest.WaitFor(t, testenv.WaitTimeout, "a round's fetch to wait for the lock", func() bool {
		return db.Count(t, "SELECT count(*) FROM pg_locks WHERE relation = $1::regclass AND NOT granted", table) > 0
	})
	relaytest.WaitFor(t, testenv.WaitTimeout, "the renewal to be overdue", func() bool {
		return db.Count(t, "SELECT count(*) FROM "+db.Table("dedup_outbox_leases")+
			" WHERE clock_timestamp() > lease_until - $1::bigint * interval '1 microsecond'", (lease*2/3-500*time.Millisecond).Microseconds()) == 1
	})
	held := len(failures())
	require.NoError(t, tx.Rollback(t.Context()))
	relaytest.WaitFor(t, testenv.WaitTimeout, "three failed rounds after the lock", func() bool { return len(failures()) >= held+3 })

	// Each wait at most the cap, and at least four fifths of twice the
	// one before (the jitter takes up to a fifth), up to four fifths of
	// the cap: the rounds after the lock go on from the streak before it.
	fails := failures()
	for i, e := range fails {
		t.Logf("failure %d: %d messages, backoff %v", i, e.Messages, e.Backoff)
	}
	for i, e := range fails {
		require.LessOrEqual(t, e.Backoff, maxBackoff, "failure %d", i)
		if i > 0 {
			require.GreaterOrEqual(t, e.Backoff, min(fails[i-1].Backoff*8/5, maxBackoff*4/5), "failure %d (%d after the lock): %v after %v",
				i, i-held, e.Backoff, fails[i-1].Backoff)
		}
	}
}
