package mysqlstore_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/store/mysqlstore"
)

// exampleDB creates a database of its own for an example on the test
// server, and returns a pool connected to it, and a function that drops
// it.
func exampleDB(ctx context.Context) (*sql.DB, func()) {
	u, err := url.Parse(cmp.Or(os.Getenv(mariaDB.Env), mariaDB.Default))
	if err != nil {
		panic(err)
	}
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr, cfg.User = "tcp", u.Host, u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		panic(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "dedup_test_example_" + hex.EncodeToString(b[:])
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		panic(err)
	}
	cfg.DBName = name
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		panic(err)
	}
	return db, func() {
		_ = db.Close()
		_, _ = admin.ExecContext(context.Background(), "DROP DATABASE "+name)
		_ = admin.Close()
	}
}

// A consumer whose handler writes an order and completes the message's
// record in the same transaction: the order is written once however often
// the message comes, with no unique key on the orders table.
func Example() {
	ctx := context.Background()
	db, drop := exampleDB(ctx)
	defer drop()

	s, err := mysqlstore.New(ctx, db, &mysqlstore.Options{Migrate: true}) // creates the table dedup_records
	if err != nil {
		panic(err)
	}
	defer s.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id VARCHAR(64) NOT NULL, amount INT NOT NULL)`); err != nil {
		panic(err)
	}

	type Order struct {
		ID     string
		Amount int
	}
	handler, err := mysqlstore.TxHandler(s, func(ctx context.Context, tx *sql.Tx, o Order) (string, error) {
		_, err := tx.ExecContext(ctx, `INSERT INTO orders (id, amount) VALUES (?, ?)`, o.ID, o.Amount)
		return "order " + o.ID + " stored", err
	}, nil)
	if err != nil {
		panic(err)
	}
	rcv, err := dedup.NewReceiver(s, func(o Order) (string, error) { return o.ID, nil }, handler,
		&dedup.Config{Namespace: "orders"})
	if err != nil {
		panic(err)
	}

	for range 3 { // the broker delivers the message three times
		res, err := rcv.Handle(ctx, Order{ID: "o-1", Amount: 42})
		fmt.Println(res.Status, res.Value, adapter.Bind(rcv).Decide(res, err).Action)
	}
	// Keys are bytes: O-1 is another order than o-1.
	res, _ := rcv.Handle(ctx, Order{ID: "O-1", Amount: 7})
	fmt.Println(res.Status, res.Value)
	var n int
	_ = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM orders`).Scan(&n)
	fmt.Println("orders written:", n)
	// Output:
	// processed order o-1 stored ack
	// duplicate order o-1 stored ack
	// duplicate order o-1 stored ack
	// processed order O-1 stored
	// orders written: 2
}

// Cleanup deletes expired records in bounded batches; RunCleanup runs it
// on an interval until its context ends.
func ExampleStore_Cleanup() {
	ctx := context.Background()
	db, drop := exampleDB(ctx)
	defer drop()
	s, err := mysqlstore.New(ctx, db, &mysqlstore.Options{CleanupBatchSize: 500, Migrate: true})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	_, _ = db.ExecContext(ctx, "INSERT INTO dedup_records (`key`, state, token, attempt, fingerprint, last_error, expires_at) "+
		"SELECT CONCAT('orders:', seq), 'completed', UNHEX(MD5(seq)), 1, '', '', UTC_TIMESTAMP(6) - INTERVAL 1 HOUR FROM seq_1_to_1200")

	// In a service: go s.RunCleanup(ctx, time.Minute), stopped by ctx.
	deleted, err := s.Cleanup(ctx)
	fmt.Println(deleted, err)
	// Output: 1200 <nil>
}
