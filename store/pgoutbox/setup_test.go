package pgoutbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/pgoutbox"
	"github.com/dedup-go/dedup/store/pgstore"
)

// quiet is the logger of the tests: what the relays log is what they
// report to the tests' observers too.
var quiet = slog.New(slog.DiscardHandler)

// testDB is a schema of the shared PostgreSQL that one test owns: created
// for the test and dropped, with everything in it, when it ends.
type testDB struct {
	pool   *pgxpool.Pool
	dsn    string
	schema string
}

// newDB creates a schema of its own for t on the shared PostgreSQL, and a
// pool of up to maxConns connections to it.
func newDB(t testing.TB, maxConns int32) *testDB {
	t.Helper()
	dsn := testenv.Postgres.Addr(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	db := &testDB{dsn: dsn, schema: "pgoutbox_test_" + hex.EncodeToString(b[:])}
	db.pool = connect(t, dsn, maxConns)
	_, err := db.pool.Exec(t.Context(), "CREATE SCHEMA "+db.schema)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := db.pool.Exec(ctx, "DROP SCHEMA "+db.schema+" CASCADE")
		db.pool.Close()
		require.NoError(t, err, "drop the test's schema")
	})
	return db
}

// connect opens a pool on dsn, closed when t ends.
func connect(t testing.TB, dsn string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// table is the name of a table of the test's schema.
func (db *testDB) table(name string) string { return db.schema + "." + name }

// outbox returns an outbox (Options.Migrate) in the test's schema.
func (db *testDB) outbox(t testing.TB, opts *pgoutbox.Options) *pgoutbox.Outbox {
	t.Helper()
	var o pgoutbox.Options
	if opts != nil {
		o = *opts
	}
	if o.Table == "" {
		o.Table = db.table("dedup_outbox")
	}
	if o.Logger == nil {
		o.Logger = quiet
	}
	o.Migrate = true
	ob, err := pgoutbox.New(t.Context(), db.pool, &o)
	require.NoError(t, err)
	return ob
}

// store returns a pgstore in the test's schema.
func (db *testDB) store(t testing.TB) *pgstore.Store {
	t.Helper()
	s, err := pgstore.New(t.Context(), db.pool, &pgstore.Options{Table: db.table("dedup_records"), Migrate: true})
	require.NoError(t, err)
	return s
}

// exec runs sql on the test's pool.
func (db *testDB) exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	_, err := db.pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err, sql)
}

// count returns the single integer sql answers.
func (db *testDB) count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.pool.QueryRow(context.Background(), sql, args...).Scan(&n), sql)
	return n
}

// order is the incoming message of the tests.
type order struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
}

func orderID(o order) (string, error) { return o.ID, nil }

// txReceiver returns a receiver whose handler runs fn in a transaction
// that completes the record (pgstore.TxHandler).
func txReceiver(t testing.TB, s *pgstore.Store, ns string, fn pgstore.TxFunc[order, string]) *dedup.Receiver[order, string] {
	t.Helper()
	h, err := pgstore.TxHandler(s, fn, nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(s, orderID, h, &dedup.Config{Namespace: ns, Lease: 5 * time.Second,
		Backoff: dedup.BackoffFunc(func(int) time.Duration { return 0 })})
	require.NoError(t, err)
	return rcv
}

// row is a message as the outbox table holds it.
type row struct {
	Seq         int64
	ID          string
	ClaimKey    string
	Name        string
	Destination string
	OrderingKey string
	Bucket      int
	Body        []byte
	Header      map[string]string
	Sent        bool
}

// rows returns the outbox's rows, by seq.
func (db *testDB) rows(t testing.TB, table string) []row {
	t.Helper()
	rs, err := db.pool.Query(context.Background(), `SELECT seq, id, claim_key, name, destination, ordering_key, bucket, body, headers, sent_at IS NOT NULL FROM `+table+` ORDER BY seq`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.Seq, &x.ID, &x.ClaimKey, &x.Name, &x.Destination, &x.OrderingKey, &x.Bucket, &x.Body, &x.Header, &x.Sent)
		return x, err
	})
	require.NoError(t, err)
	return out
}
