package mysqlstore_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/mysqlstore"
)

// requireMisconfigured checks that err is the misconfiguration error, not
// an outage, and names every one of names.
func requireMisconfigured(t *testing.T, err error, names ...string) {
	t.Helper()
	require.ErrorIs(t, err, mysqlstore.ErrMisconfigured)
	require.ErrorIs(t, err, store.ErrInvalidConfig)
	require.NotErrorIs(t, err, store.ErrUnavailable)
	for _, n := range names {
		require.ErrorContains(t, err, n)
	}
}

// TestNewMisconfigured: New finds a table that does not fit the store at
// start-up, and names what is missing: the database, the table, columns, a
// column's type (a key column that compares by a collation, a
// case-insensitive one above all), the unique key on key (or one on a
// prefix of it only), a NOT NULL column the store's INSERT leaves out,
// another engine than InnoDB; and a relation that is not a table. With
// Options.Migrate a missing table is created, but a missing database is
// still an error.
func TestNewMisconfigured(t *testing.T) {
	t.Parallel()
	d := newDB(t, 2)
	ctx := t.Context()
	newWith := func(o *mysqlstore.Options) error {
		s, err := mysqlstore.New(ctx, d.db, o)
		if err == nil {
			_ = s.Close()
		}
		return err
	}
	requireMisconfigured(t, newWith(&mysqlstore.Options{Table: "missing"}), "missing", "does not exist", "Options.Migrate")
	requireMisconfigured(t, newWith(&mysqlstore.Options{Table: "dedup_test_nosuchdb_x.dedup_records"}), `database "dedup_test_nosuchdb_x" does not exist`)
	requireMisconfigured(t, newWith(&mysqlstore.Options{Table: "dedup_test_nosuchdb_x.dedup_records", Migrate: true}), "migrate", "database does not exist")

	// No database in the DSN, and a table name without one.
	noDB := open(t, d.with(nil, func(c *mysql.Config) { c.DBName = "" }), 1)
	_, err := mysqlstore.New(ctx, noDB, nil)
	requireMisconfigured(t, err, "no database is selected")

	// A table of the store's schema, then changed.
	s := d.store(t, &mysqlstore.Options{Table: "changed"})
	d.exec(t, "ALTER TABLE changed DROP COLUMN fingerprint, DROP COLUMN last_error, MODIFY attempt BIGINT NOT NULL, ADD COLUMN tenant VARCHAR(10) NOT NULL, MODIFY expires_at DATETIME NOT NULL")
	requireMisconfigured(t, s.Migrate(ctx), "fingerprint, last_error", "attempt is bigint", "tenant is NOT NULL", "expires_at is datetime, the store needs datetime(6)")
	requireMisconfigured(t, newWith(&mysqlstore.Options{Table: "changed"}), "fingerprint, last_error", "attempt is bigint", "tenant is NOT NULL")

	// A key that compares by a collation: case-insensitive, it would merge
	// Order-1 and order-1.
	d.store(t, &mysqlstore.Options{Table: "collated"})
	d.exec(t, "ALTER TABLE collated MODIFY `key` VARCHAR(768) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL")
	requireMisconfigured(t, newWith(&mysqlstore.Options{Table: "collated"}), "column key is varchar(768) COLLATE utf8mb4_general_ci", "Order-1 and order-1")
	// A key too short for the store's keys, on MyISAM (whose keys hold
	// 1,000 bytes at most).
	d.store(t, &mysqlstore.Options{Table: "short"})
	d.exec(t, "ALTER TABLE short MODIFY `key` VARBINARY(255) NOT NULL, ENGINE=MyISAM")
	requireMisconfigured(t, newWith(&mysqlstore.Options{Table: "short"}), "column key is varbinary(255)", "engine is MyISAM, the store needs InnoDB")

	// Every column, but no unique key on key; or one on a prefix of it.
	d.store(t, &mysqlstore.Options{Table: "nokey"})
	d.exec(t, "ALTER TABLE nokey DROP PRIMARY KEY")
	requireMisconfigured(t, newWith(&mysqlstore.Options{Table: "nokey"}), "no primary key or unique key on the whole of key")
	d.store(t, &mysqlstore.Options{Table: "prefixkey"})
	d.exec(t, "ALTER TABLE prefixkey DROP PRIMARY KEY, ADD UNIQUE KEY k10 (`key`(10)), ADD UNIQUE KEY tok (token)")
	requireMisconfigured(t, newWith(&mysqlstore.Options{Table: "prefixkey"}), "no primary key or unique key on the whole of key", "unique key(s) k10, tok besides")

	d.exec(t, "CREATE VIEW aview AS SELECT * FROM changed")
	requireMisconfigured(t, newWith(&mysqlstore.Options{Table: "aview"}), "is not a table (VIEW)")
}

// TestTableDroppedAfterNew: a table that disappears while the store runs
// makes every call fail with the misconfiguration error, naming the
// table, not with an outage; and a receiver, even with FailOpen, does not
// run the handler unprotected for it, nor retry it as the store's outage.
func TestTableDroppedAfterNew(t *testing.T) {
	t.Parallel()
	d := newDB(t, 2)
	ctx := t.Context()
	s := d.store(t, nil)
	c, err := s.Acquire(ctx, store.AcquireRequest{Key: "held", Lease: time.Minute})
	require.NoError(t, err)
	d.exec(t, "DROP TABLE dedup_records")

	table := "dedup_records"
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
	for _, err := range s.CompleteBatch(ctx, []store.CompleteRequest{{Key: "held", Token: c.Token, Retention: time.Hour}}) {
		requireMisconfigured(t, err, table)
	}

	ran := false
	rcv, err := dedup.NewReceiver(s, paymentID, func(context.Context, payment) (int, error) { ran = true; return 1, nil },
		&dedup.Config{Namespace: "pay", FailOpen: true})
	require.NoError(t, err)
	res, err := rcv.Handle(ctx, payment{ID: "p1"})
	requireMisconfigured(t, err, table)
	require.False(t, ran, "a misconfigured store is no outage: fail-open must not run the handler unprotected")
	dec := adapter.Bind(rcv).Decide(res, err)
	require.Equal(t, delivery.Retry, dec.Action)
	require.NotEqual(t, delivery.ReasonStoreUnavailable, dec.Reason)
}

// TestUserWithoutRights: a user without any privilege on the table does
// not see it, and one that lacks some fails New with the misconfiguration
// error that names the user, what it lacks and the GRANT to run; once
// granted, New succeeds; a privilege revoked at run time is the same
// error at the call that needs it, not an outage.
func TestUserWithoutRights(t *testing.T) {
	t.Parallel()
	d := newDB(t, 2)
	d.store(t, nil) // the table, made by the tests' user
	user, db := loginUser(t, d)
	ctx := t.Context()
	newAsUser := func() (*mysqlstore.Store, error) {
		s, err := mysqlstore.New(ctx, db, nil)
		if err == nil {
			t.Cleanup(func() { _ = s.Close() })
		}
		return s, err
	}
	table := "`" + d.name + "`.`dedup_records`"

	_, err := newAsUser()
	requireMisconfigured(t, err, user, "no access to the table's database")

	d.exec(t, "GRANT SELECT ON "+table+" TO '"+user+"'@'%'")
	_, err = newAsUser()
	requireMisconfigured(t, err, user, "lacks the privilege(s) INSERT, UPDATE, DELETE on it", "GRANT SELECT, INSERT, UPDATE, DELETE ON "+table)

	d.exec(t, "GRANT INSERT, UPDATE ON "+table+" TO '"+user+"'@'%'")
	_, err = newAsUser()
	requireMisconfigured(t, err, user, "lacks the privilege(s) DELETE on it")

	d.exec(t, "GRANT DELETE ON "+table+" TO '"+user+"'@'%'")
	s, err := newAsUser()
	require.NoError(t, err)
	c, err := s.Acquire(ctx, store.AcquireRequest{Key: "k", Lease: time.Minute})
	require.NoError(t, err)

	// Revoked at run time: the completion is an UPDATE.
	d.exec(t, "REVOKE UPDATE ON "+table+" FROM '"+user+"'@'%'")
	// CI saw one run (of many) in which the UPDATE right after the REVOKE
	// succeeded on a connection opened before it: drop the idle ones, so
	// that the completion runs on a connection opened after the REVOKE.
	db.SetMaxIdleConns(0)
	db.SetMaxIdleConns(2)
	err = s.Complete(ctx, store.CompleteRequest{Key: "k", Token: c.Token, Retention: time.Hour})
	requireMisconfigured(t, err, "privilege", "UPDATE command denied")
}

// loginUser creates a user (any host, with a password) that has no
// privilege at all, and a pool connected as it to the test's database;
// the user is dropped when t ends.
func loginUser(t *testing.T, d *testDB) (string, *sql.DB) {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	user := "dedup_noaccess_" + hex.EncodeToString(b[:])
	d.exec(t, "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw'")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := d.db.ExecContext(ctx, "DROP USER '"+user+"'@'%'")
		require.NoError(t, err)
	})
	db := open(t, d.with(nil, func(c *mysql.Config) { c.User, c.Passwd = user, "pw" }), 2)
	return user, db
}
