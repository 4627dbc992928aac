package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/pgstore"
)

// testDB is a schema of the shared PostgreSQL that one test owns: it is
// created for the test and dropped, with everything in it, when it ends.
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
	db := &testDB{dsn: dsn, schema: "pgstore_test_" + hex.EncodeToString(b[:])}
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

// store returns a store (Options.Migrate) on the test's schema; opts may be nil.
func (db *testDB) store(t testing.TB, opts *pgstore.Options) *pgstore.Store {
	t.Helper()
	return newStore(t, db.pool, db.table("dedup_records"), opts)
}

func newStore(t testing.TB, pool *pgxpool.Pool, table string, opts *pgstore.Options) *pgstore.Store {
	t.Helper()
	var o pgstore.Options
	if opts != nil {
		o = *opts
	}
	if o.Table == "" {
		o.Table = table
	}
	if o.Timeout == 0 {
		// The default (2 s) is a production bound; on a busy CI machine one
		// call of 64 racing for a key has taken longer (storetest's
		// ContentionOnTakeover, red once), and a test that does not pin
		// the bound itself checks what a call does, not how fast.
		o.Timeout = 30 * time.Second
	}
	o.Migrate = true
	s, err := pgstore.New(context.Background(), pool, &o)
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

// dbNow reads the database's clock, the one leases and expiry use.
func dbNow(t testing.TB, pool *pgxpool.Pool) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT clock_timestamp()", pgx.QueryExecModeExec).Scan(&now))
	return now
}

// pgxPool opens a pool from cfg.
func pgxPool(cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	return pgxpool.NewWithConfig(context.Background(), cfg)
}
