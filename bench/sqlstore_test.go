package bench

import (
	"context"
	"database/sql"
	"net/url"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/mysqlstore"
	"github.com/dedup-go/dedup/store/pgstore"
)

// The SQL rows measure the stores that complete a record inside the
// handler's own transaction, each on the shared server of its database
// (PostgreSQL, and MariaDB as store/mysqlstore's tests find it), in a
// schema or database of each row's own: beside a bare transaction that
// does the handler's business write alone (BEGIN, INSERT, COMMIT), a new
// message through TxHandler (the claim, then BEGIN, the same INSERT, the
// completion, COMMIT), and a duplicate of a completed message through
// Handle. Sequential: one message at a time.

// mariaDB is the shared MariaDB, as a mysql:// URL that DEDUP_TEST_MYSQL
// overrides (scripts/services.sh mariadb makes its user and database).
var mariaDB = testenv.Service{
	Name:    "MariaDB",
	Env:     "DEDUP_TEST_MYSQL",
	Default: "mysql://dedup:dedup@127.0.0.1:3306/dedup_test",
	Start:   "scripts/services.sh mariadb",
}

// mariaDBConfig is the shared MariaDB's connection settings, on the
// database its URL names.
func mariaDBConfig(tb testing.TB) *mysql.Config {
	u, err := url.Parse(mariaDB.Addr(tb))
	if err != nil {
		tb.Fatal(err)
	}
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr, cfg.User = "tcp", u.Host, u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	return cfg
}

// openMariaDB creates a database of its own for a row and returns a pool
// on it; the database is dropped when tb ends.
func openMariaDB(tb testing.TB) *sql.DB {
	cfg := mariaDBConfig(tb)
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		tb.Fatal(err)
	}
	name := "dedup_test_" + uniqueName("sql")
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		tb.Fatal(err)
	}
	cfg.DBName = name
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = db.Close()
		if _, err := admin.Exec("DROP DATABASE " + name); err != nil {
			tb.Errorf("drop database %s: %v", name, err)
		}
		_ = admin.Close()
	})
	return db
}

// openPostgres creates a schema of its own for a row and returns a pool
// whose search_path is that schema; the schema is dropped when tb ends.
func openPostgres(tb testing.TB) *pgxpool.Pool {
	dsn := testenv.Postgres.Addr(tb)
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, dsn)
	if err != nil {
		tb.Fatal(err)
	}
	name := uniqueName("sql")
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		tb.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		pool.Close()
		if _, err := admin.Exec(context.Background(), "DROP SCHEMA "+name+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", name, err)
		}
		admin.Close()
	})
	return pool
}

func init() {
	ctx := context.Background()
	const ordersTable = "CREATE TABLE orders (id VARCHAR(64) NOT NULL, amount INT NOT NULL)"
	handle := func(tb testing.TB, rcv *dedup.Receiver[order, struct{}], id string, want delivery.Status) {
		if res, err := rcv.Handle(ctx, order{ID: id, Amount: 1}); err != nil || res.Status != want {
			tb.Fatalf("status %v, want %v: %v", res.Status, want, err)
		}
	}
	register(row{
		name: "new message in the handler's transaction, MariaDB 10.11 (mysqlstore)",
		unit: "ns/op", n: 1000,
		setup: func(tb testing.TB) []side {
			db := openMariaDB(tb)
			db.SetMaxIdleConns(4)
			if _, err := db.Exec(ordersTable + " ENGINE=InnoDB"); err != nil {
				tb.Fatal(err)
			}
			insert, err := db.Prepare("INSERT INTO orders (id, amount) VALUES (?, ?)")
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { _ = insert.Close() })
			s, err := mysqlstore.New(ctx, db, &mysqlstore.Options{Migrate: true})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { _ = s.Close() })
			write := func(ctx context.Context, tx *sql.Tx, o order) error {
				_, err := tx.StmtContext(ctx, insert).ExecContext(ctx, o.ID, o.Amount)
				return err
			}
			h, err := mysqlstore.TxHandler(s, func(ctx context.Context, tx *sql.Tx, o order) (struct{}, error) {
				return struct{}{}, write(ctx, tx, o)
			}, nil)
			if err != nil {
				tb.Fatal(err)
			}
			rcv, err := dedup.NewReceiver(s, orderID, h, nil)
			if err != nil {
				tb.Fatal(err)
			}
			handle(tb, rcv, "dup", delivery.StatusProcessed)
			return []side{
				{name: "bare transaction: BEGIN, INSERT, COMMIT", run: func(tb testing.TB, n int) sample {
					keys := ids(runPrefix("bare"), n)
					return timed(n, func(i int) {
						tx, err := db.BeginTx(ctx, nil)
						if err == nil {
							if err = write(ctx, tx, order{ID: keys[i], Amount: 1}); err == nil {
								err = tx.Commit()
							}
						}
						if err != nil {
							tb.Fatal(err)
						}
					})
				}},
				{name: "mysqlstore.TxHandler: claim, then BEGIN, INSERT, completion, COMMIT", run: func(tb testing.TB, n int) sample {
					keys := ids(runPrefix("dedup"), n)
					return timed(n, func(i int) { handle(tb, rcv, keys[i], delivery.StatusProcessed) })
				}},
				{name: "a duplicate through Handle (one read)", run: func(tb testing.TB, n int) sample {
					return timed(n, func(int) { handle(tb, rcv, "dup", delivery.StatusDuplicate) })
				}},
			}
		},
	}, row{
		name: "new message in the handler's transaction, PostgreSQL (pgstore)",
		unit: "ns/op", n: 1000,
		setup: func(tb testing.TB) []side {
			pool := openPostgres(tb)
			if _, err := pool.Exec(ctx, ordersTable); err != nil {
				tb.Fatal(err)
			}
			s, err := pgstore.New(ctx, pool, &pgstore.Options{Migrate: true})
			if err != nil {
				tb.Fatal(err)
			}
			const insert = "INSERT INTO orders (id, amount) VALUES ($1, $2)"
			h, err := pgstore.TxHandler(s, func(ctx context.Context, tx pgx.Tx, o order) (struct{}, error) {
				_, err := tx.Exec(ctx, insert, o.ID, o.Amount)
				return struct{}{}, err
			}, nil)
			if err != nil {
				tb.Fatal(err)
			}
			rcv, err := dedup.NewReceiver(s, orderID, h, nil)
			if err != nil {
				tb.Fatal(err)
			}
			handle(tb, rcv, "dup", delivery.StatusProcessed)
			return []side{
				{name: "bare transaction: BEGIN, INSERT, COMMIT", run: func(tb testing.TB, n int) sample {
					keys := ids(runPrefix("bare"), n)
					return timed(n, func(i int) {
						err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
							_, err := tx.Exec(ctx, insert, keys[i], 1)
							return err
						})
						if err != nil {
							tb.Fatal(err)
						}
					})
				}},
				{name: "pgstore.TxHandler: claim, then BEGIN, INSERT, completion, COMMIT", run: func(tb testing.TB, n int) sample {
					keys := ids(runPrefix("dedup"), n)
					return timed(n, func(i int) { handle(tb, rcv, keys[i], delivery.StatusProcessed) })
				}},
				{name: "a duplicate through Handle (one read-only statement)", run: func(tb testing.TB, n int) sample {
					return timed(n, func(int) { handle(tb, rcv, "dup", delivery.StatusDuplicate) })
				}},
			}
		},
	})
}
