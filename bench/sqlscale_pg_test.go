package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/pgstore"
)

// The scale harness on PostgreSQL (TestSQLScale): pgstore's tables in the
// schema scalePGSchema of the shared server.

// scalePGSchema holds the harness's tables; dropped at the end unless a
// table is kept in it.
const scalePGSchema = "dedup_scale"

// scalePGLoad inserts the records $1 to $2 of $3 (scaleID), the first
// created at $4, in key order: each a record as pgstore's Complete leaves
// it.
const scalePGLoad = `INSERT INTO %[1]s (key, state, token, attempt, fingerprint, result, last_error, lease_until, expires_at, created_at, completed_at)
SELECT 'default:' || lpad(to_hex(((i - 1) << 32) / $3::bigint), 8, '0') || '-' || substr(h, 9, 4) || '-' || substr(h, 13, 4) || '-' || substr(h, 17, 4) || '-' || substr(h, 21),
	'completed', md5('token' || i)::uuid, 1, '', convert_to('` + scaleResult + `', 'UTF8'), '', NULL,
	$4::timestamptz + i * interval '10 milliseconds' + interval '2 milliseconds' + interval '365 days',
	$4::timestamptz + i * interval '10 milliseconds',
	$4::timestamptz + i * interval '10 milliseconds' + interval '2 milliseconds'
FROM generate_series($1::bigint, $2::bigint) AS i, LATERAL (SELECT md5(i::text) AS h) AS m
ORDER BY i`

// scalePG is the scale harness's PostgreSQL.
type scalePG struct {
	dsn   string
	admin *pgxpool.Pool
}

// openScalePostgres connects to the shared PostgreSQL and makes the
// harness's schema.
func openScalePostgres(tb testing.TB) scaleBackend {
	dsn := testenv.Postgres.Addr(tb)
	admin, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(admin.Close)
	pg := &scalePG{dsn: dsn, admin: admin}
	pg.exec(tb, "CREATE SCHEMA IF NOT EXISTS "+scalePGSchema)
	return pg
}

func (pg *scalePG) exec(tb testing.TB, sql string, args ...any) {
	tb.Helper()
	if _, err := pg.admin.Exec(context.Background(), sql, args...); err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
}

// qualified is table in the harness's schema.
func (pg *scalePG) qualified(table string) string { return scalePGSchema + "." + table }

func (pg *scalePG) server(tb testing.TB) string {
	var version, buffers string
	err := pg.admin.QueryRow(context.Background(), "SELECT current_setting('server_version'), current_setting('shared_buffers')").Scan(&version, &buffers)
	if err != nil {
		tb.Fatal(err)
	}
	return "PostgreSQL " + version + ", shared_buffers " + buffers
}

func (pg *scalePG) rows(tb testing.TB, table string) int64 {
	var n int64
	err := pg.admin.QueryRow(context.Background(), "SELECT count(*) FROM "+pg.qualified(table)).Scan(&n)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return -1
	}
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

func (pg *scalePG) drop(tb testing.TB, tables ...string) {
	q := make([]string, len(tables))
	for i, t := range tables {
		q[i] = pg.qualified(t)
	}
	pg.exec(tb, "DROP TABLE IF EXISTS "+strings.Join(q, ", "))
}

func (pg *scalePG) open(tb testing.TB, table string) scaleReceivers {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pg.dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	// A generous Timeout: a statement slowed by a cold cache is measured,
	// not failed.
	s, err := pgstore.New(ctx, pool, &pgstore.Options{Table: pg.qualified(table), Migrate: true, Timeout: time.Minute})
	if err != nil {
		tb.Fatal(err)
	}
	orders := pg.qualified(scaleOrders(table))
	pg.exec(tb, "DROP TABLE IF EXISTS "+orders)
	pg.exec(tb, "CREATE TABLE "+orders+" (id VARCHAR(64) NOT NULL, amount INT NOT NULL)")
	insert := "INSERT INTO " + orders + " (id, amount) VALUES ($1, $2)"
	h, err := pgstore.TxHandler(s, func(ctx context.Context, tx pgx.Tx, o order) (scaleReply, error) {
		if _, err := tx.Exec(ctx, insert, o.ID, o.Amount); err != nil {
			return scaleReply{}, err
		}
		return scaleDone(ctx, o)
	}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return scaleReceivers{plain: scaleReceiver(tb, s, scaleDone), tx: scaleReceiver(tb, s, h), get: s.Get}
}

func (pg *scalePG) load(tb testing.TB, table string, lo, hi, n int, t0 time.Time) {
	pg.exec(tb, fmt.Sprintf(scalePGLoad, pg.qualified(table)), lo, hi, n, t0)
}

// analyze runs VACUUM too: a table just loaded has every row's hint bits
// to set and its visibility map to fill, which autovacuum would
// otherwise do while the harness measures.
//
// Then a CHECKPOINT, when the harness's role may ask for one: the load's
// dirty pages are written back before the rounds, not during them.
func (pg *scalePG) analyze(tb testing.TB, table string) {
	pg.exec(tb, "VACUUM (ANALYZE) "+pg.qualified(table))
	if _, err := pg.admin.Exec(context.Background(), "CHECKPOINT"); err != nil {
		tb.Logf("pgstore: CHECKPOINT after the load refused (%v): the load's write-back may overlap the rounds", err)
	}
}

// warm reads the table and its primary key into shared_buffers with
// pg_prewarm when the server has it (CREATE EXTENSION, once), else the
// primary key alone in an index-only scan (a sequential scan of the heap
// would go through a small ring of buffers, and leave nothing behind).
func (pg *scalePG) warm(tb testing.TB, table string) {
	ctx := context.Background()
	if _, err := pg.admin.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_prewarm"); err == nil {
		var pages int64
		err := pg.admin.QueryRow(ctx, `SELECT pg_prewarm($1::regclass) + coalesce((SELECT sum(pg_prewarm(i.indexrelid))
FROM pg_index i WHERE i.indrelid = $1::regclass AND i.indisprimary), 0)::bigint`, pg.qualified(table)).Scan(&pages)
		if err != nil {
			tb.Fatal(err)
		}
		return
	}
	tx, err := pg.admin.Begin(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var n int64
	if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
		tb.Fatal(err)
	}
	if err := tx.QueryRow(ctx, "SELECT count(key) FROM "+pg.qualified(table)).Scan(&n); err != nil {
		tb.Fatal(err)
	}
}

func (pg *scalePG) sizes(tb testing.TB, table string) scaleSizes {
	var s scaleSizes
	err := pg.admin.QueryRow(context.Background(), `SELECT pg_total_relation_size(c.oid), pg_relation_size(c.oid), pg_indexes_size(c.oid),
	coalesce((SELECT sum(pg_relation_size(i.indexrelid)) FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary), 0)::bigint,
	coalesce((SELECT sum(pg_relation_size(i.indexrelid)) FROM pg_index i WHERE i.indrelid = c.oid AND NOT i.indisprimary), 0)::bigint
FROM pg_class c WHERE c.oid = $1::regclass`, pg.qualified(table)).Scan(&s.Total, &s.Data, &s.Indexes, &s.PrimaryKey, &s.Expiry)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func (pg *scalePG) forget(tb testing.TB, table string, ids []string) {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = scaleKey(id)
	}
	pg.exec(tb, "DELETE FROM "+pg.qualified(table)+" WHERE key = ANY($1::text[])", keys)
}

func (pg *scalePG) done(tb testing.TB) {
	// RESTRICT: a schema that still holds a kept table stays.
	_, _ = pg.admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+scalePGSchema+" RESTRICT")
}
