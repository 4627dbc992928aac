package mysqlstore_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/mysqlstore"
)

// mariaDB is the shared server of the tests, as a URL
// (mysql://user:password@host:port/database?params), which DEDUP_TEST_MYSQL
// overrides; scripts/services.sh mariadb starts it and makes its user and
// database. The user must be allowed to create databases named
// dedup_test_*, and users.
var mariaDB = testenv.Service{
	Name:    "MariaDB",
	Env:     "DEDUP_TEST_MYSQL",
	Default: "mysql://dedup:dedup@127.0.0.1:3306/dedup_test",
	Start:   "scripts/services.sh mariadb",
}

// serverConfig returns the driver's config of the shared server, or skips
// t (fails it under DEDUP_TEST_REQUIRE=1) when it is unreachable.
func serverConfig(t testing.TB) *mysql.Config {
	t.Helper()
	return configOf(t, mariaDB.Addr(t))
}

// configOf turns a mysql:// URL into the driver's config.
func configOf(t testing.TB, raw string) *mysql.Config {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	cfg := mysql.NewConfig()
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.Net = "tcp"
	cfg.Addr = u.Host
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	cfg.Timeout = 5 * time.Second
	for k, v := range u.Query() {
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params[k] = v[0]
	}
	return cfg
}

// testDB is a database of the shared server that one test owns: created
// for the test and dropped, with everything in it, when it ends.
type testDB struct {
	db   *sql.DB
	cfg  *mysql.Config // connects to the test's database
	name string
}

// newDB creates a database of its own for t, and a pool of up to maxConns
// connections to it.
func newDB(t testing.TB, maxConns int) *testDB {
	t.Helper()
	cfg := serverConfig(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	d := &testDB{name: "dedup_test_" + hex.EncodeToString(b[:])}
	admin := open(t, cfg, 1)
	_, err := admin.Exec("CREATE DATABASE " + d.name)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := admin.ExecContext(ctx, "DROP DATABASE "+d.name)
		require.NoError(t, err, "drop the test's database")
	})
	d.cfg = cfg.Clone()
	d.cfg.DBName = d.name
	d.db = open(t, d.cfg, maxConns)
	return d
}

// open opens a pool on cfg, closed when t ends.
func open(t testing.TB, cfg *mysql.Config, maxConns int) *sql.DB {
	t.Helper()
	conn, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// with returns a copy of the test's config with the session variables
// and driver parameters of params set.
func (d *testDB) with(params map[string]string, edit func(*mysql.Config)) *mysql.Config {
	cfg := d.cfg.Clone()
	for k, v := range params {
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params[k] = v
	}
	if edit != nil {
		edit(cfg)
	}
	return cfg
}

// store returns a store (Options.Migrate) on the test's database; opts may
// be nil.
func (d *testDB) store(t testing.TB, opts *mysqlstore.Options) *mysqlstore.Store {
	t.Helper()
	return newStore(t, d.db, opts)
}

func newStore(t testing.TB, db *sql.DB, opts *mysqlstore.Options) *mysqlstore.Store {
	t.Helper()
	var o mysqlstore.Options
	if opts != nil {
		o = *opts
	}
	o.Migrate = true
	if o.Timeout == 0 {
		// The default (2 s) is a production bound; on a busy CI machine a
		// MariaDB call has taken longer, and a test that does not pin the
		// bound itself measures what a call does, not how fast.
		o.Timeout = 30 * time.Second
	}
	s, err := mysqlstore.New(context.Background(), db, &o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// exec runs q on the test's pool.
func (d *testDB) exec(t testing.TB, q string, args ...any) {
	t.Helper()
	_, err := d.db.Exec(q, args...)
	require.NoError(t, err, q)
}

// count returns the single integer q answers.
func (d *testDB) count(t testing.TB, q string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, d.db.QueryRow(q, args...).Scan(&n), q)
	return n
}

// dbNow reads the database's clock, the one leases and expiry use.
func dbNow(t testing.TB, db *sql.DB) time.Time {
	t.Helper()
	var s string
	require.NoError(t, db.QueryRow("SELECT DATE_FORMAT(UTC_TIMESTAMP(6), '%Y-%m-%d %H:%i:%s.%f')").Scan(&s))
	now, err := time.Parse("2006-01-02 15:04:05.999999", s)
	require.NoError(t, err)
	return now
}

// waitDBTime waits until the database's clock has passed at.
func waitDBTime(t testing.TB, db *sql.DB, at time.Time) {
	t.Helper()
	deadline := time.Now().Add(testenv.WaitTimeout)
	for !dbNow(t, db).After(at) {
		require.True(t, time.Now().Before(deadline), "the database's clock did not pass %v", at)
		time.Sleep(10 * time.Millisecond)
	}
}
