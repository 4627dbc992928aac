package pgoutbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store/pgoutbox"
	"github.com/dedup-go/dedup/store/pgoutbox/internal/relaytest"
)

// TestFetchPlan: on a table filled since it was last analyzed (never,
// here: autovacuum is off), the fetch still scans the unsent rows by seq
// and stops at the batch, whether the relay holds every bucket or a few,
// with a plan made for the values (pgx's first executions) or a generic
// one: no sort of every unsent row.
func TestFetchPlan(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 2)
	ob := db.Outbox(t, &pgoutbox.Options{Buckets: 64})
	table := db.Table("dedup_outbox")
	db.Exec(t, "ALTER TABLE "+table+" SET (autovacuum_enabled = false)")
	db.Exec(t, `INSERT INTO `+table+` (id, claim_key, name, destination, ordering_key, key_hash, body)
SELECT md5(i::text), 'plan:' || i, '1', 'orders.events', 'c-' || (i % 1000), abs(hashtext('c-' || (i % 1000))), '\x00'::bytea
FROM generate_series(1, 20000) i`)
	conn, err := db.Pool.Acquire(t.Context())
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(t.Context(), "PREPARE fetch_plan(int[], int, uuid) AS "+pgoutbox.FetchSQL(ob))
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(context.Background(), "DEALLOCATE fetch_plan; RESET plan_cache_mode") }()
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		_, err := conn.Exec(t.Context(), "SET plan_cache_mode = "+mode)
		require.NoError(t, err)
		for _, held := range []string{"{0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63}", "{1,5,9,13,17,21,25,29}"} {
			for _, batch := range []int{256, 4096} {
				rows, err := conn.Query(t.Context(), fmt.Sprintf("EXPLAIN EXECUTE fetch_plan('%s', %d, '00000000-0000-4000-8000-000000000000')", held, batch), pgx.QueryExecModeSimpleProtocol)
				require.NoError(t, err)
				lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
				require.NoError(t, err)
				plan := strings.Join(lines, "\n")
				require.Contains(t, plan, "Index Scan using dedup_outbox_unsent_idx", "%s, %d buckets held, batch %d:\n%s", mode, strings.Count(held, ",")+1, batch, plan)
				require.NotContains(t, plan, "Sort", "%s, %d buckets held, batch %d:\n%s", mode, strings.Count(held, ",")+1, batch, plan)
			}
		}
	}
}

// outboxV1 is the schema of version 1 (pgoutbox before issue 26's relay):
// sent messages stayed in the table, with sent_at set.
const outboxV1 = `CREATE TABLE {t} (
	seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	id           text COLLATE "C" NOT NULL,
	claim_key    text NOT NULL,
	name         text NOT NULL,
	destination  text NOT NULL,
	ordering_key text NOT NULL,
	key_hash     integer NOT NULL CHECK (key_hash >= 0),
	bucket       integer GENERATED ALWAYS AS (key_hash % 4) STORED,
	body         bytea NOT NULL,
	headers      jsonb,
	created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
	sent_at      timestamptz,
	CONSTRAINT dedup_outbox_id_key UNIQUE (id)
);
CREATE INDEX dedup_outbox_pending_idx ON {t} (bucket, seq) WHERE sent_at IS NULL;
CREATE INDEX dedup_outbox_sent_idx ON {t} (sent_at) WHERE sent_at IS NOT NULL;
CREATE TABLE {t}_leases (
	bucket      integer PRIMARY KEY,
	owner       uuid,
	lease_until timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO {t}_leases (bucket) SELECT b FROM generate_series(0, 3) b;
CREATE TABLE {t}_relays (
	relay       uuid PRIMARY KEY,
	alive_until timestamptz NOT NULL
);`

// TestMigrateFromV1: an outbox table of version 1, with messages sent
// long ago, sent lately and unsent, is upgraded in place by New with
// Migrate (twice: the second finds nothing to do). A relay then publishes
// the unsent messages only, in order; a handler that runs again for a
// message sent under version 1 does not write it again; the cleanup
// deletes the rows version 1 marked sent past the retention, and then
// their ids.
func TestMigrateFromV1(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 8)
	table := db.Table("dedup_outbox")
	db.Exec(t, strings.ReplaceAll(outboxV1, "{t}", table))
	var ids []string
	for n := range 6 {
		claim := fmt.Sprintf("shop:o-%d", n)
		id := outbox.MessageID(claim, "created")
		ids = append(ids, id)
		var sentAt, createdAt any // version 1's Add, then its relay's mark
		switch n {
		case 0, 1:
			sentAt, createdAt = time.Now().Add(-2*time.Hour), time.Now().Add(-3*time.Hour)
		case 2:
			sentAt, createdAt = time.Now(), time.Now().Add(-time.Minute)
		default:
			createdAt = time.Now()
		}
		db.Exec(t, `INSERT INTO `+table+` (id, claim_key, name, destination, ordering_key, key_hash, body, created_at, sent_at)
VALUES ($1, $2, 'created', 'orders.created', 'c-1', $3, $4, $5, $6)`, id, claim, int32(relaytest.FNV32a("c-1")), fmt.Appendf(nil, "%d", n), createdAt, sentAt)
	}

	ob := db.Outbox(t, nil)
	require.Equal(t, 4, ob.Buckets(), "the table's bucket count")
	db.Outbox(t, nil) // a second migration finds it done
	require.Equal(t, 6, db.Count(t, "SELECT count(*) FROM "+db.Table("dedup_outbox_ids")), "every message's id, sent or not")
	require.Zero(t, db.Count(t, "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = 'dedup_outbox_pending_idx'", db.Schema),
		"version 1's index by bucket, which nothing uses now, is gone")
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = 'dedup_outbox_unsent_idx'", db.Schema))

	pub := newCheckingPublisher(map[string][]string{"c-1": ids[3:]}, 0, nil)
	r := relaytest.NewRelay(t, ob, pub, &pgoutbox.RelayOptions{Lease: 5 * time.Second, Retention: time.Hour, CleanupInterval: 100 * time.Millisecond})
	relaytest.Start(t, r)
	relaytest.WaitFor(t, testenv.WaitTimeout, "the unsent messages sent", func() bool { return db.Unsent(t) == 0 })
	pub.check(t)
	pub.mu.Lock()
	require.Equal(t, map[string]int{ids[3]: 1, ids[4]: 1, ids[5]: 1}, pub.published, "the unsent messages, once each; none version 1 sent")
	pub.mu.Unlock()

	// The handler of a message version 1 sent runs again (its record
	// forgotten): the message is not written again.
	s := db.Store(t)
	rcv := txReceiver(t, s, "shop", func(ctx context.Context, tx pgx.Tx, o order) (string, error) {
		w, err := ob.Writer(ctx, tx)
		if err != nil {
			return "", err
		}
		return w.Add(ctx, pgoutbox.Message{Name: "created", Destination: "orders.created", OrderingKey: "c-1", Body: []byte("again")})
	})
	res, err := rcv.Handle(t.Context(), order{ID: "o-2"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)
	require.Equal(t, ids[2], res.Value, "the same id")
	require.Zero(t, db.Unsent(t), "a message sent under version 1, written again")

	// Past the retention: the rows of the messages sent long ago, then
	// their ids; the one sent lately stays. The relay counts what a
	// cleanup deleted once its statements returned, after their commit:
	// the count is waited for too, not read the moment the table shows
	// the deletion.
	relaytest.WaitFor(t, testenv.WaitTimeout, "the cleanup", func() bool {
		return db.Count(t, "SELECT count(*) FROM "+db.Table("dedup_outbox_ids")) <= 4 && r.Stats().Cleaned >= 2
	})
	require.Equal(t, 4, db.Count(t, "SELECT count(*) FROM "+db.Table("dedup_outbox_ids")), "the ids of the messages sent lately or unsent stay")
	var left []string
	rows, err := db.Pool.Query(t.Context(), "SELECT id FROM "+table+" ORDER BY seq")
	require.NoError(t, err)
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{ids[2]}, left, "the row version 1 sent lately, kept for the retention")
	require.Equal(t, uint64(2), r.Stats().Cleaned)
}

// TestWriterSentID: a handler that runs again after its message was sent
// (the row deleted by the relay's mark) gets the same id and writes
// nothing: the id is kept past the sending.
func TestWriterSentID(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 8)
	ob := db.Outbox(t, &pgoutbox.Options{Buckets: 2})
	s := db.Store(t)
	var ids []string
	rcv := txReceiver(t, s, "shop", func(ctx context.Context, tx pgx.Tx, o order) (string, error) {
		w, err := ob.Writer(ctx, tx)
		if err != nil {
			return "", err
		}
		id, err := w.Add(ctx, pgoutbox.Message{Destination: "orders.events", OrderingKey: o.ID, Body: []byte("x")})
		ids = append(ids, id)
		return "ok", err
	})
	_, err := rcv.Handle(t.Context(), order{ID: "o-4"})
	require.NoError(t, err)
	pub := newCheckingPublisher(map[string][]string{"o-4": ids}, 0, nil)
	relaytest.Start(t, relaytest.NewRelay(t, ob, pub, &pgoutbox.RelayOptions{Lease: 5 * time.Second}))
	relaytest.WaitFor(t, testenv.WaitTimeout, "the message sent", func() bool { return db.Unsent(t) == 0 })

	require.NoError(t, rcv.Forget(t.Context(), "o-4"))
	res, err := rcv.Handle(t.Context(), order{ID: "o-4"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status, "the record was forgotten: the handler ran again")
	require.Len(t, ids, 2)
	require.Equal(t, ids[0], ids[1])
	require.Zero(t, db.Unsent(t), "written again")
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM "+db.Table("dedup_outbox_ids")))
	pub.mu.Lock()
	defer pub.mu.Unlock()
	require.Equal(t, 1, pub.published[ids[0]])
}

// TestFetchNeedsLiveLease: a relay reads the messages of the buckets it
// names only while it holds a live lease: one whose lease ran out (paused,
// its renewals failing) reads nothing, even of buckets it names, as
// another relay may be publishing them.
func TestFetchNeedsLiveLease(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 2)
	ob := db.Outbox(t, &pgoutbox.Options{Buckets: 1})
	_, err := relaytest.Writer{DB: db, OB: ob}.Write(t.Context(), "order:1", pgoutbox.Message{Destination: "orders.events", OrderingKey: "k", Body: []byte("x")})
	require.NoError(t, err)
	const relay, other = "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"
	leases := db.Table("dedup_outbox_leases")
	read := func() int {
		rows, err := db.Pool.Query(t.Context(), pgoutbox.FetchSQL(ob), []int32{0}, 10, relay)
		require.NoError(t, err)
		n := 0
		for rows.Next() {
			n++
		}
		require.NoError(t, rows.Err())
		return n
	}
	db.Exec(t, "UPDATE "+leases+" SET owner = $1, lease_until = clock_timestamp() + interval '1 hour'", relay)
	require.Equal(t, 1, read(), "a live lease")
	db.Exec(t, "UPDATE "+leases+" SET lease_until = clock_timestamp() - interval '1 second'")
	require.Zero(t, read(), "a lease that ran out")
	db.Exec(t, "UPDATE "+leases+" SET owner = $1, lease_until = clock_timestamp() + interval '1 hour'", other)
	require.Zero(t, read(), "a lease another relay took")
}
