package bench

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedup-go/dedup/internal/pgtest"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/mysqlstore"
	"github.com/dedup-go/dedup/store/pgstore"
)

// The stores under churn. By default each runs on a server of the run's
// own, started from the installed PostgreSQL or MariaDB with their stock
// settings (autovacuum on, as a production server has it) and a data
// directory of its own, so that its growth is the run's alone; both are
// stopped and removed at the end. DEDUP_SQL_CHURN_SERVER=shared runs on
// the shared servers instead, in a schema or database of the run's own
// (openPostgres, openMariaDB), with whatever settings they have (the
// shared PostgreSQL of a CI machine runs without autovacuum). Each pool is
// large enough for the writers, the cleanup and the sampler.

func openChurnTarget(t *testing.T, name string, cfg churnConfig) churnTarget {
	if name == "pg" {
		return openChurnPostgres(t, cfg)
	}
	return openChurnMariaDB(t, cfg)
}

// churnVacuum are the autovacuum settings in force for the table:
// the server's, or the table's own storage parameters.
type churnVacuum struct {
	on        bool
	naptime   time.Duration
	threshold float64
	scale     float64
}

func openChurnPostgres(t *testing.T, cfg churnConfig) churnTarget {
	ctx := context.Background()
	var pc *pgxpool.Config
	var dataDir string
	if cfg.server == "own" {
		srv := pgtest.Start(t)
		dataDir = srv.Data()
		var err error
		if pc, err = pgxpool.ParseConfig(srv.DSN()); err != nil {
			t.Fatal(err)
		}
		if len(cfg.pgConf) > 0 {
			conn, err := pgx.Connect(ctx, srv.DSN())
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range cfg.pgConf {
				k, v, _ := strings.Cut(kv, "=")
				if _, err := conn.Exec(ctx, "ALTER SYSTEM SET "+pgx.Identifier{k}.Sanitize()+" = "+churnQuotePG(v)); err != nil {
					t.Fatalf("DEDUP_SQL_CHURN_PG_CONF: %s: %v", kv, err)
				}
			}
			if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
				t.Fatal(err)
			}
			_ = conn.Close(ctx)
		}
	} else {
		pc = openPostgres(t).Config()
	}
	pc.MaxConns = int32(cfg.workers + 2)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // before openPostgres drops the schema, or the server stops
	s, err := pgstore.New(ctx, pool, &pgstore.Options{Migrate: true, CleanupBatchSize: cfg.batchSize})
	if err != nil {
		t.Fatal(err)
	}
	const table, index = pgstore.DefaultTable, pgstore.DefaultTable + "_expires_at_idx"
	if len(cfg.pgTable) > 0 {
		if _, err := pool.Exec(ctx, "ALTER TABLE "+table+" SET ("+strings.Join(cfg.pgTable, ", ")+")"); err != nil {
			t.Fatalf("DEDUP_SQL_CHURN_PG_TABLE: %v", err)
		}
	}
	if cfg.server != "own" {
		dataDir = churnLocalDir(func(dir *string) error { return pool.QueryRow(ctx, "SHOW data_directory").Scan(dir) })
	}

	var vac churnVacuum
	var naptime, version string
	var relopts []string
	err = pool.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('autovacuum')::bool, current_setting('autovacuum_naptime'),
	current_setting('autovacuum_vacuum_threshold')::float8, current_setting('autovacuum_vacuum_scale_factor')::float8,
	COALESCE((SELECT reloptions FROM pg_class WHERE oid = $1::regclass), '{}')`, table).
		Scan(&version, &vac.on, &naptime, &vac.threshold, &vac.scale, &relopts)
	if err != nil {
		t.Fatal(err)
	}
	if vac.naptime, err = churnPGInterval(naptime); err != nil {
		t.Fatal(err)
	}
	for _, o := range relopts {
		k, v, _ := strings.Cut(o, "=")
		f, err := strconv.ParseFloat(v, 64)
		switch {
		case err != nil:
		case k == "autovacuum_vacuum_threshold":
			vac.threshold = f
		case k == "autovacuum_vacuum_scale_factor":
			vac.scale = f
		}
	}
	var settings []string
	rows, err := pool.Query(ctx, `SELECT name || '=' || setting || COALESCE(unit, '') FROM pg_settings WHERE name IN
	('autovacuum', 'autovacuum_naptime', 'autovacuum_vacuum_threshold', 'autovacuum_vacuum_scale_factor',
	 'autovacuum_vacuum_insert_scale_factor', 'autovacuum_vacuum_cost_limit', 'autovacuum_vacuum_cost_delay',
	 'vacuum_cost_limit', 'synchronous_commit', 'fsync', 'shared_buffers', 'max_wal_size', 'checkpoint_timeout') ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		settings = append(settings, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	settings = append(settings, fmt.Sprintf("reloptions=%v", relopts))

	target := churnTarget{
		name:     "pg",
		store:    s,
		cleanup:  s.Cleanup,
		settings: "PostgreSQL " + version + " (" + cfg.server + " server): " + strings.Join(settings, " "),
		vacuum:   &vac,
		dataDir:  dataDir,
	}
	target.stats = func(ctx context.Context) (churnStats, error) {
		var st churnStats
		err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE expires_at <= clock_timestamp()) FROM `+table).
			Scan(&st.Rows, &st.Backlog)
		if err != nil {
			return st, err
		}
		err = pool.QueryRow(ctx, `SELECT pg_table_size(c.oid), pg_indexes_size(c.oid), pg_relation_size($2::regclass),
	pg_total_relation_size(c.oid), s.n_live_tup, s.n_dead_tup, s.autovacuum_count,
	COALESCE(EXTRACT(epoch FROM clock_timestamp() - s.last_autovacuum)::float8, -1),
	pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint
FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid WHERE c.oid = $1::regclass`, table, index).
			Scan(&st.TableBytes, &st.IndexBytes, &st.ExpiryIdx, &st.TotalBytes, &st.LiveTup, &st.DeadTup, &st.Autovacs,
				&st.LastAutovac, &st.LogBytes)
		st.FileBytes = st.TotalBytes
		st.DataDir = churnDirSize(target.dataDir)
		return st, err
	}
	return target
}

// churnPGInterval parses a setting such as "1min", "30s" or "500ms".
func churnPGInterval(v string) (time.Duration, error) {
	for _, u := range []struct {
		suffix string
		unit   time.Duration
	}{{"ms", time.Millisecond}, {"min", time.Minute}, {"s", time.Second}, {"h", time.Hour}, {"d", 24 * time.Hour}} {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			f, err := strconv.ParseFloat(n, 64)
			return time.Duration(f * float64(u.unit)), err
		}
	}
	f, err := strconv.ParseFloat(v, 64) // seconds
	return time.Duration(f * float64(time.Second)), err
}

func openChurnMariaDB(t *testing.T, cfg churnConfig) churnTarget {
	ctx := context.Background()
	var db *sql.DB
	var dataDir string
	if cfg.server == "own" {
		mc, dir := startChurnMariaDB(t, cfg.mysqlConf)
		dataDir = dir
		admin, err := sql.Open("mysql", mc.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		_, err = admin.Exec("CREATE DATABASE churn")
		_ = admin.Close()
		if err != nil {
			t.Fatal(err)
		}
		mc.DBName = "churn"
		if db, err = sql.Open("mysql", mc.FormatDSN()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
	} else {
		db = openMariaDB(t)
	}
	db.SetMaxOpenConns(cfg.workers + 2)
	db.SetMaxIdleConns(cfg.workers + 2)
	s, err := mysqlstore.New(ctx, db, &mysqlstore.Options{Migrate: true, CleanupBatchSize: cfg.batchSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // before db is closed
		if err := s.Close(); err != nil {
			t.Errorf("close the store: %v", err)
		}
	})
	const table = mysqlstore.DefaultTable

	var version, settings string
	err = db.QueryRowContext(ctx, `SELECT VERSION(), CONCAT_WS(' ',
	CONCAT('innodb_purge_threads=', @@innodb_purge_threads), CONCAT('innodb_purge_batch_size=', @@innodb_purge_batch_size),
	CONCAT('innodb_max_purge_lag=', @@innodb_max_purge_lag), CONCAT('innodb_buffer_pool_size=', @@innodb_buffer_pool_size),
	CONCAT('innodb_flush_log_at_trx_commit=', @@innodb_flush_log_at_trx_commit), CONCAT('innodb_log_file_size=', @@innodb_log_file_size),
	CONCAT('innodb_stats_auto_recalc=', @@innodb_stats_auto_recalc), CONCAT('innodb_file_per_table=', @@innodb_file_per_table))`).
		Scan(&version, &settings)
	if err != nil {
		t.Fatal(err)
	}
	target := churnTarget{
		name:     "mysql",
		store:    s,
		cleanup:  s.Cleanup,
		settings: "MariaDB " + version + " (" + cfg.server + " server): " + settings,
		dataDir:  dataDir,
	}
	if cfg.server != "own" {
		target.dataDir = churnLocalDir(func(dir *string) error { return db.QueryRowContext(ctx, "SELECT @@datadir").Scan(dir) })
	}
	target.stats = func(ctx context.Context) (churnStats, error) {
		var st churnStats
		err := db.QueryRowContext(ctx, "SELECT COUNT(*), COALESCE(SUM(expires_at <= UTC_TIMESTAMP(6)), 0) FROM "+table).
			Scan(&st.Rows, &st.Backlog)
		if err != nil {
			return st, err
		}
		err = db.QueryRowContext(ctx, `SELECT t.DATA_LENGTH, t.INDEX_LENGTH, t.DATA_FREE, COALESCE(s.ALLOCATED_SIZE, 0)
FROM information_schema.TABLES t
LEFT JOIN information_schema.INNODB_SYS_TABLESPACES s ON s.NAME = CONCAT(t.TABLE_SCHEMA, '/', t.TABLE_NAME)
WHERE t.TABLE_SCHEMA = DATABASE() AND t.TABLE_NAME = ?`, table).Scan(&st.TableBytes, &st.IndexBytes, &st.FreeBytes, &st.FileBytes)
		if err != nil {
			return st, err
		}
		st.ExpiryIdx = st.IndexBytes // the one secondary index; the primary key is the table
		st.TotalBytes = st.TableBytes + st.IndexBytes
		st.LastAutovac = -1
		rows, err := db.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_history_list_length', 'Innodb_os_log_written')")
		if err != nil {
			return st, err
		}
		defer func() { _ = rows.Close() }()
		for rows.Next() {
			var name string
			var v int64
			if err := rows.Scan(&name, &v); err != nil {
				return st, err
			}
			if name == "Innodb_history_list_length" {
				st.History = v
			} else {
				st.LogBytes = v
			}
		}
		st.DataDir = churnDirSize(target.dataDir)
		return st, rows.Err()
	}
	return target
}

// churnLocalDir is the server's data directory as read reports it, when it is
// a directory of this machine, else "".
func churnLocalDir(read func(*string) error) string {
	var dir string
	if err := read(&dir); err != nil {
		return ""
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return ""
	}
	return dir
}

// churnQuotePG quotes v as a string literal of PostgreSQL.
func churnQuotePG(v string) string { return "'" + strings.ReplaceAll(v, "'", "''") + "'" }

// startChurnMariaDB starts a MariaDB server of the run's own on a free
// loopback port, with the stock settings but the ones it needs to run
// apart (its data directory, port and socket; no grant tables, so root
// connects with every privilege) and the options given (name=value, each
// passed as --name=value), and returns its driver config and data
// directory. It is killed, and its folder removed, when t ends.
func startChurnMariaDB(t *testing.T, options []string) (*mysql.Config, string) {
	t.Helper()
	const install = "scripts/services.sh mariadb (apt-get install mariadb-server)"
	bin := testenv.Binary(t, "mariadbd", install)
	installDB := testenv.Binary(t, "mariadb-install-db", install)
	dir, err := os.MkdirTemp("", "bench-churn-mariadb-")
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	port := testenv.FreePort(t)
	var root []string
	if os.Geteuid() == 0 {
		root = []string{"--user=root"}
	}
	args := append([]string{"--no-defaults", "--datadir=" + data, "--auth-root-authentication-method=normal", "--skip-test-db"}, root...)
	if out, err := exec.Command(installDB, args...).CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	args = append([]string{"--no-defaults", "--datadir=" + data, "--port=" + strconv.Itoa(port), "--bind-address=127.0.0.1",
		"--socket=" + filepath.Join(dir, "sock"), "--pid-file=" + filepath.Join(dir, "pid"), "--skip-grant-tables",
		"--log-error=" + filepath.Join(dir, "log")}, root...)
	for _, o := range options {
		args = append(args, "--"+o)
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		select {
		case <-done:
		case <-time.After(testenv.WaitTimeout):
			t.Errorf("mariadbd (pid %d) did not exit after SIGKILL", cmd.Process.Pid)
		}
		_ = os.RemoveAll(dir)
	})
	mc := mysql.NewConfig()
	mc.User, mc.Net, mc.Addr = "root", "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(testenv.WaitTimeout)
	for {
		if conn, err := net.DialTimeout("tcp", mc.Addr, time.Second); err == nil {
			_ = conn.Close()
			return mc, data
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(dir, "log"))
			t.Fatalf("mariadbd exited at start:\n%s", log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("mariadbd did not accept connections on %s within %v", mc.Addr, testenv.WaitTimeout)
		}
	}
}
