// Package relaytest holds what the tests of pgoutbox share with its
// end-to-end tests on real brokers (the test-only module in
// store/pgoutbox/e2e): a schema of its own per test on the shared
// PostgreSQL, a writer that commits messages as a handler would, relays
// stopped when the test ends, and a recorder of the relays' events. Only
// tests import it.
package relaytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/adaptertest"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/pgoutbox"
	"github.com/dedup-go/dedup/store/pgstore"
)

// Quiet is the logger of the tests: what the relays log is what they
// report to the tests' observers too.
var Quiet = slog.New(slog.DiscardHandler)

// DB is a schema of the shared PostgreSQL that one test owns: created
// for the test and dropped, with everything in it, when it ends.
type DB struct {
	Pool   *pgxpool.Pool
	DSN    string
	Schema string
}

// NewDB creates a schema of its own for t on the shared PostgreSQL, and a
// pool of up to maxConns connections to it.
func NewDB(t testing.TB, maxConns int32) *DB {
	t.Helper()
	dsn := testenv.Postgres.Addr(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	db := &DB{DSN: dsn, Schema: "pgoutbox_test_" + hex.EncodeToString(b[:])}
	db.Pool = Connect(t, dsn, maxConns)
	_, err := db.Pool.Exec(t.Context(), "CREATE SCHEMA "+db.Schema)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := db.Pool.Exec(ctx, "DROP SCHEMA "+db.Schema+" CASCADE")
		db.Pool.Close()
		require.NoError(t, err, "drop the test's schema")
	})
	return db
}

// Connect opens a pool on dsn, closed when t ends.
func Connect(t testing.TB, dsn string, maxConns int32) *pgxpool.Pool {
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

// Table is the name of a table of the test's schema.
func (db *DB) Table(name string) string { return db.Schema + "." + name }

// Outbox returns an outbox (Options.Migrate) in the test's schema.
func (db *DB) Outbox(t testing.TB, opts *pgoutbox.Options) *pgoutbox.Outbox {
	t.Helper()
	var o pgoutbox.Options
	if opts != nil {
		o = *opts
	}
	if o.Table == "" {
		o.Table = db.Table("dedup_outbox")
	}
	if o.Logger == nil {
		o.Logger = Quiet
	}
	o.Migrate = true
	ob, err := pgoutbox.New(t.Context(), db.Pool, &o)
	require.NoError(t, err)
	return ob
}

// Store returns a pgstore in the test's schema.
func (db *DB) Store(t testing.TB) *pgstore.Store {
	t.Helper()
	s, err := pgstore.New(t.Context(), db.Pool, &pgstore.Options{Table: db.Table("dedup_records"), Migrate: true})
	require.NoError(t, err)
	return s
}

// Exec runs sql on the test's pool.
func (db *DB) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err, sql)
}

// Count returns the single integer sql answers.
func (db *DB) Count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), sql, args...).Scan(&n), sql)
	return n
}

// Unsent counts the outbox's unsent messages.
func (db *DB) Unsent(t testing.TB) int {
	return db.Count(t, "SELECT count(*) FROM "+db.Table("dedup_outbox")+" WHERE sent_at IS NULL")
}

// Writer writes messages into an outbox as handlers would: each call one
// transaction, under a claim of its own.
type Writer struct {
	DB *DB
	OB *pgoutbox.Outbox
}

// Write commits one transaction holding msgs, under the claim of key.
func (w Writer) Write(ctx context.Context, key string, msgs ...pgoutbox.Message) ([]string, error) {
	ctx = store.ContextWithClaim(ctx, &store.HeldClaim{Key: key, Attempt: 1})
	tx, err := w.DB.Pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	wr, err := w.OB.Writer(ctx, tx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, m := range msgs {
		id, err := wr.Add(ctx, m)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, tx.Commit(ctx)
}

// WriteKeyed writes perKey messages for each of keys, interleaved, one
// transaction per message, and returns each key's ids in writing order.
func WriteKeyed(t testing.TB, w Writer, keys []string, perKey int, dest func(key string, n int) string) map[string][]string {
	t.Helper()
	order := map[string][]string{}
	for n := range perKey {
		for _, k := range keys {
			ids, err := w.Write(t.Context(), fmt.Sprintf("order:%s-%d", k, n),
				pgoutbox.Message{Destination: dest(k, n), OrderingKey: k, Body: fmt.Appendf(nil, "%s/%d", k, n)})
			require.NoError(t, err)
			order[k] = append(order[k], ids...)
		}
	}
	return order
}

// KeysN returns n ordering keys, "key-00" on.
func KeysN(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("key-%02d", i))
	}
	return out
}

// FNV32a is the hash the outbox buckets ordering keys (and ids) by.
func FNV32a(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32() & 0x7fffffff
}

// NewRelay returns a relay on ob publishing to pub.
func NewRelay(t testing.TB, ob *pgoutbox.Outbox, pub outbox.Publisher, opts *pgoutbox.RelayOptions) *pgoutbox.Relay {
	t.Helper()
	r, err := pgoutbox.NewRelay(ob, pub, opts)
	require.NoError(t, err)
	return r
}

// Start starts r on the test's context and stops it (bounded) when t
// ends.
func Start(t testing.TB, r *pgoutbox.Relay) {
	t.Helper()
	require.NoError(t, r.Start(context.WithoutCancel(t.Context())))
	adaptertest.StopAtCleanup(t, r)
}

// Events records a relay's events, and when each came.
type Events struct {
	mu  sync.Mutex
	all []outbox.Event
	at  []time.Time
}

// Observe records ev.
func (e *Events) Observe(_ context.Context, ev outbox.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
	e.at = append(e.at, time.Now())
}

// Timed returns the events of kind k (of op, when op is set), and when
// each came.
func (e *Events) Timed(k outbox.EventKind, op string) ([]outbox.Event, []time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []outbox.Event
	var at []time.Time
	for i, ev := range e.all {
		if ev.Kind == k && (op == "" || ev.Op == op) {
			out = append(out, ev)
			at = append(at, e.at[i])
		}
	}
	return out, at
}

// Of returns the events of kind k (of op, for failures, when op is set).
func (e *Events) Of(k outbox.EventKind, op string) []outbox.Event {
	out, _ := e.Timed(k, op)
	return out
}

// WaitFor polls cond every 20ms until it holds, failing t after within.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
