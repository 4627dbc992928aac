package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/pgstore"
)

// requireMisconfigured checks that err is the misconfiguration error, not
// an outage, and names every one of names.
func requireMisconfigured(t *testing.T, err error, names ...string) {
	t.Helper()
	require.ErrorIs(t, err, pgstore.ErrMisconfigured)
	require.ErrorIs(t, err, store.ErrInvalidConfig)
	require.NotErrorIs(t, err, store.ErrUnavailable)
	for _, n := range names {
		require.ErrorContains(t, err, n)
	}
}

// TestNewMisconfigured: New finds a table that does not fit the store at
// start-up, and names what is missing: the schema, the table (in its
// schema or the search_path), columns, a column's type, the unique key,
// a NOT NULL column the store's INSERT leaves out; and a relation that is
// not a table. With Options.Migrate a missing table is created, but a
// missing schema is still an error.
func TestNewMisconfigured(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	ctx := t.Context()
	newWith := func(o *pgstore.Options) error {
		_, err := pgstore.New(ctx, db.pool, o)
		return err
	}
	requireMisconfigured(t, newWith(&pgstore.Options{Table: db.table("missing")}), db.table("missing"), "does not exist", "Options.Migrate")
	requireMisconfigured(t, newWith(&pgstore.Options{Table: "nosuchschema_x.dedup_records"}), `schema "nosuchschema_x" does not exist`)
	requireMisconfigured(t, newWith(&pgstore.Options{Table: "nosuchschema_x.dedup_records", Migrate: true}), "migrate", "schema")

	cfg := db.pool.Config()
	cfg.ConnConfig.RuntimeParams["search_path"] = db.schema
	inPath, err := pgxPool(cfg)
	require.NoError(t, err)
	t.Cleanup(inPath.Close)
	_, err = pgstore.New(ctx, inPath, nil)
	requireMisconfigured(t, err, "dedup_records", "search_path", db.schema)

	// A table of the store's schema, then changed.
	s := db.store(t, &pgstore.Options{Table: db.table("changed")})
	db.exec(t, "ALTER TABLE "+db.table("changed")+" DROP COLUMN fingerprint, DROP COLUMN last_error, ALTER COLUMN attempt TYPE bigint, ADD COLUMN tenant text NOT NULL")
	requireMisconfigured(t, s.Migrate(ctx), "fingerprint, last_error", "attempt is bigint", "tenant is NOT NULL")
	requireMisconfigured(t, newWith(&pgstore.Options{Table: db.table("changed")}), "fingerprint, last_error", "attempt is bigint", "tenant is NOT NULL")

	// Every column, and no unique key on key.
	s = db.store(t, &pgstore.Options{Table: db.table("nokey")})
	db.exec(t, "ALTER TABLE "+db.table("nokey")+" DROP CONSTRAINT nokey_pkey")
	requireMisconfigured(t, newWith(&pgstore.Options{Table: db.table("nokey")}), "unique index on key")
	_, err = s.Acquire(ctx, store.AcquireRequest{Key: "k", Lease: time.Minute})
	requireMisconfigured(t, err, "unique index on key") // SQLSTATE 42P10 at run time

	db.exec(t, "CREATE VIEW "+db.table("view")+" AS SELECT * FROM "+db.table("nokey"))
	requireMisconfigured(t, newWith(&pgstore.Options{Table: db.table("view")}), "is not a table")
}

// TestTableDroppedAfterNew: a table that disappears while the store runs
// makes every call fail with the misconfiguration error, naming the
// table, not with an outage; and a receiver, even with FailOpen, does not
// run the handler unprotected for it, nor retry it as the store's outage.
func TestTableDroppedAfterNew(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	ctx := t.Context()
	s := db.store(t, nil)
	c, err := s.Acquire(ctx, store.AcquireRequest{Key: "held", Lease: time.Minute})
	require.NoError(t, err)
	db.exec(t, "DROP TABLE "+db.table("dedup_records"))

	table := db.table("dedup_records")
	_, err = s.Acquire(ctx, store.AcquireRequest{Key: "k", Lease: time.Minute})
	requireMisconfigured(t, err, table, "does not exist")
	requireMisconfigured(t, s.Complete(ctx, store.CompleteRequest{Key: "held", Token: c.Token, Retention: time.Hour}), table)
	requireMisconfigured(t, s.Release(ctx, store.ReleaseRequest{Key: "held", Token: c.Token, Retention: time.Hour}), table)
	requireMisconfigured(t, s.Extend(ctx, store.ExtendRequest{Key: "held", Token: c.Token, Lease: time.Minute}), table)
	_, err = s.Get(ctx, "held")
	requireMisconfigured(t, err, table)
	for _, err := range s.Scan(ctx, "") {
		requireMisconfigured(t, err, table)
	}
	_, err = s.Cleanup(ctx)
	requireMisconfigured(t, err, table)
	for _, o := range s.AcquireBatch(ctx, []store.AcquireRequest{{Key: "a", Lease: time.Minute}, {Key: "b", Lease: time.Minute}}) {
		requireMisconfigured(t, o.Err, table)
	}

	ran := false
	rcv, err := dedup.NewReceiver(s, paymentID, func(context.Context, payment) (int, error) { ran = true; return 1, nil },
		&dedup.Config{Namespace: "pay", FailOpen: true})
	require.NoError(t, err)
	res, err := rcv.Handle(ctx, payment{ID: "p1"})
	requireMisconfigured(t, err, table)
	require.False(t, ran, "a misconfigured store is no outage: fail-open must not run the handler unprotected")
	d := adapter.Bind(rcv).Decide(res, err)
	require.Equal(t, delivery.Retry, d.Action)
	require.NotEqual(t, delivery.ReasonStoreUnavailable, d.Reason)
}

// TestRoleWithoutRights: a role that may not use the table's schema, or
// lacks a privilege on the table, fails New with the misconfiguration
// error that names the role and what it lacks; once granted, New
// succeeds; a privilege revoked at run time is the same error at the
// call that needs it, not an outage.
func TestRoleWithoutRights(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	db.store(t, nil) // the table, owned by the tests' superuser
	table := db.table("dedup_records")
	role, pool := loginRole(t, db)
	ctx := t.Context()
	newAsRole := func() (*pgstore.Store, error) {
		return pgstore.New(ctx, pool, &pgstore.Options{Table: table})
	}

	_, err := newAsRole()
	requireMisconfigured(t, err, role, "USAGE", db.schema)

	db.exec(t, "GRANT USAGE ON SCHEMA "+db.schema+" TO "+role)
	_, err = newAsRole()
	requireMisconfigured(t, err, role, "privilege(s) SELECT, INSERT, UPDATE, DELETE on it", "GRANT")

	db.exec(t, "GRANT SELECT, INSERT ON "+table+" TO "+role)
	_, err = newAsRole()
	requireMisconfigured(t, err, role, "privilege(s) UPDATE, DELETE on it")

	db.exec(t, "GRANT UPDATE ON "+table+" TO "+role)
	_, err = newAsRole()
	requireMisconfigured(t, err, role, "privilege(s) DELETE on it")

	db.exec(t, "GRANT DELETE ON "+table+" TO "+role)
	s, err := newAsRole()
	require.NoError(t, err)
	_, err = s.Acquire(ctx, store.AcquireRequest{Key: "k", Lease: time.Minute})
	require.NoError(t, err)

	// Revoked at run time: the claim's ON CONFLICT DO UPDATE needs UPDATE.
	db.exec(t, "REVOKE UPDATE ON "+table+" FROM "+role)
	_, err = s.Acquire(ctx, store.AcquireRequest{Key: "k2", Lease: time.Minute})
	requireMisconfigured(t, err, role, "privilege")
}

// loginRole creates a role that may log in (trust authentication) and
// has no privilege at all, and a pool connected as it; the role is
// dropped, with the privileges granted to it, when t ends.
func loginRole(t *testing.T, db *testDB) (string, *pgxpool.Pool) {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	role := "dedup_test_noaccess_" + hex.EncodeToString(b[:])
	db.exec(t, "CREATE ROLE "+role+" LOGIN")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, sql := range []string{"DROP OWNED BY " + role, "DROP ROLE " + role} {
			_, err := db.pool.Exec(ctx, sql)
			require.NoError(t, err, sql)
		}
	})
	cfg := db.pool.Config()
	cfg.ConnConfig.User = role
	pool, err := pgxPool(cfg)
	require.NoError(t, err, fmt.Sprintf("connect as %s", role))
	t.Cleanup(pool.Close) // before the role is dropped
	return role, pool
}
