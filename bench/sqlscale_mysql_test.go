package bench

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dedup-go/dedup/store/mysqlstore"
)

// The scale harness on MariaDB (TestSQLScale): mysqlstore's tables in the
// database scaleMariaDBName of the shared server.

// scaleMariaDBName is the harness's database (the shared server's user
// may create those named dedup_test...); dropped at the end unless a
// table is kept in it.
const scaleMariaDBName = "dedup_test_scale"

// scaleMariaDBLoad inserts the records %[2]d to %[3]d of %[4]d
// (scaleID), the first created at ?, in key order, from the SEQUENCE
// engine's table of those numbers: each a record as mysqlstore's Complete
// leaves it. Its times are UTC, as the store's are.
const scaleMariaDBLoad = "INSERT INTO %[1]s (`key`, state, token, attempt, fingerprint, result, last_error, lease_until, expires_at, created_at, completed_at)\n" +
	"SELECT CONCAT('default:', LPAD(LOWER(HEX(((seq - 1) << 32) DIV %[4]d)), 8, '0'), '-', SUBSTR(h, 9, 4), '-', SUBSTR(h, 13, 4), '-', SUBSTR(h, 17, 4), '-', SUBSTR(h, 21)),\n" +
	"\t'completed', UNHEX(MD5(CONCAT('token', seq))), 1, '', '" + scaleResult + "', '', NULL,\n" +
	"\tt0 + INTERVAL (seq * 10000 + 2000) MICROSECOND + INTERVAL 365 DAY,\n" +
	"\tt0 + INTERVAL (seq * 10000) MICROSECOND,\n" +
	"\tt0 + INTERVAL (seq * 10000 + 2000) MICROSECOND\n" +
	"FROM (SELECT seq, MD5(seq) AS h, CAST(? AS DATETIME(6)) AS t0 FROM seq_%[2]d_to_%[3]d) AS s\n" +
	"ORDER BY seq"

// scaleMaria is the scale harness's MariaDB.
type scaleMaria struct {
	cfg   *mysql.Config // on the harness's database
	admin *sql.DB
}

// openScaleMariaDB connects to the shared MariaDB and makes the harness's
// database.
func openScaleMariaDB(tb testing.TB) scaleBackend {
	cfg := mariaDBConfig(tb)
	first, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		tb.Fatal(err)
	}
	_, err = first.Exec("CREATE DATABASE IF NOT EXISTS " + scaleMariaDBName)
	_ = first.Close()
	if err != nil {
		tb.Fatal(err)
	}
	cfg.DBName = scaleMariaDBName
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = admin.Close() })
	return &scaleMaria{cfg: cfg, admin: admin}
}

func (m *scaleMaria) exec(tb testing.TB, q string, args ...any) {
	tb.Helper()
	if _, err := m.admin.Exec(q, args...); err != nil {
		tb.Fatalf("%s: %v", q, err)
	}
}

func (m *scaleMaria) server(tb testing.TB) string {
	var version string
	var pool int64
	if err := m.admin.QueryRow("SELECT VERSION(), @@innodb_buffer_pool_size").Scan(&version, &pool); err != nil {
		tb.Fatal(err)
	}
	return "MariaDB " + version + ", innodb_buffer_pool_size " + scaleBytes(pool)
}

func (m *scaleMaria) rows(tb testing.TB, table string) int64 {
	var exists bool
	err := m.admin.QueryRow("SELECT COUNT(*) > 0 FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", table).Scan(&exists)
	if err != nil {
		tb.Fatal(err)
	}
	if !exists {
		return -1
	}
	var n int64
	if err := m.admin.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}

func (m *scaleMaria) drop(tb testing.TB, tables ...string) {
	m.exec(tb, "DROP TABLE IF EXISTS "+strings.Join(tables, ", "))
}

func (m *scaleMaria) open(tb testing.TB, table string) scaleReceivers {
	ctx := context.Background()
	db, err := sql.Open("mysql", m.cfg.FormatDSN())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	db.SetMaxIdleConns(4)
	// A generous Timeout: a statement slowed by a cold cache is measured,
	// not failed.
	s, err := mysqlstore.New(ctx, db, &mysqlstore.Options{Table: table, Migrate: true, Timeout: time.Minute})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	orders := scaleOrders(table)
	m.exec(tb, "DROP TABLE IF EXISTS "+orders)
	m.exec(tb, "CREATE TABLE "+orders+" (id VARCHAR(64) NOT NULL, amount INT NOT NULL) ENGINE=InnoDB")
	insert, err := db.Prepare("INSERT INTO " + orders + " (id, amount) VALUES (?, ?)")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = insert.Close() })
	h, err := mysqlstore.TxHandler(s, func(ctx context.Context, tx *sql.Tx, o order) (scaleReply, error) {
		if _, err := tx.StmtContext(ctx, insert).ExecContext(ctx, o.ID, o.Amount); err != nil {
			return scaleReply{}, err
		}
		return scaleDone(ctx, o)
	}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return scaleReceivers{plain: scaleReceiver(tb, s, scaleDone), tx: scaleReceiver(tb, s, h), get: s.Get}
}

func (m *scaleMaria) load(tb testing.TB, table string, lo, hi, n int, t0 time.Time) {
	m.exec(tb, fmt.Sprintf(scaleMariaDBLoad, table, lo, hi, n), t0.Format("2006-01-02 15:04:05.000000"))
}

// warm reads the clustered primary key, which holds the rows, whole.
func (m *scaleMaria) warm(tb testing.TB, table string) {
	var n int64
	if err := m.admin.QueryRow("SELECT COUNT(*) FROM " + table + " FORCE INDEX (PRIMARY)").Scan(&n); err != nil {
		tb.Fatal(err)
	}
}

func (m *scaleMaria) analyze(tb testing.TB, table string) {
	// ANALYZE TABLE answers with a result set, which Exec would leave
	// unread.
	rows, err := m.admin.Query("ANALYZE TABLE " + table)
	if err != nil {
		tb.Fatal(err)
	}
	for rows.Next() {
	}
	if err := rows.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
}

func (m *scaleMaria) sizes(tb testing.TB, table string) scaleSizes {
	var s scaleSizes
	err := m.admin.QueryRow("SELECT DATA_LENGTH, INDEX_LENGTH, DATA_FREE FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", table).
		Scan(&s.Data, &s.Indexes, &s.Free)
	if err != nil {
		tb.Fatal(err)
	}
	s.Expiry = s.Indexes
	// The tablespace file as allocated on disk; information_schema shows
	// it to a user with the PROCESS privilege.
	err = m.admin.QueryRow("SELECT ALLOCATED_SIZE FROM information_schema.INNODB_SYS_TABLESPACES WHERE NAME = CONCAT(DATABASE(), '/', ?)", table).Scan(&s.Total)
	if err != nil {
		tb.Logf("mysqlstore: the tablespace of %s: %v; its total is data, indexes and free space", table, err)
		s.Total = s.Data + s.Indexes + s.Free
	}
	return s
}

func (m *scaleMaria) forget(tb testing.TB, table string, ids []string) {
	const per = 500
	for len(ids) > 0 {
		part := ids[:min(per, len(ids))]
		ids = ids[len(part):]
		args := make([]any, len(part))
		for i, id := range part {
			args[i] = scaleKey(id)
		}
		m.exec(tb, "DELETE FROM "+table+" WHERE `key` IN (?"+strings.Repeat(", ?", len(part)-1)+")", args...)
	}
}

func (m *scaleMaria) done(tb testing.TB) {
	var tables int
	if err := m.admin.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()").Scan(&tables); err != nil {
		tb.Error(err)
		return
	}
	if tables == 0 {
		m.exec(tb, "DROP DATABASE "+scaleMariaDBName)
	}
}
