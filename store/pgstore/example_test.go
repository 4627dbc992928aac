package pgstore_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/store/pgstore"
)

// exampleSchema creates a schema of its own for an example on the test
// PostgreSQL, and returns a pool whose search_path is that schema, and a
// function that drops it.
func exampleSchema(ctx context.Context) (*pgxpool.Pool, func()) {
	dsn := cmp.Or(os.Getenv("DEDUP_TEST_POSTGRES"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "pgstore_example_" + hex.EncodeToString(b[:])
	admin, err := pgxpool.New(ctx, dsn)
	if err != nil {
		panic(err)
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		panic(err)
	}
	cfg, _ := pgxpool.ParseConfig(dsn)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		panic(err)
	}
	return pool, func() {
		pool.Close()
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		admin.Close()
	}
}

// A consumer whose handler writes an order and completes the message's
// record in the same transaction: the order is written once however often
// the message comes, with no unique index on the orders table.
func Example() {
	ctx := context.Background()
	pool, drop := exampleSchema(ctx)
	defer drop()

	s, err := pgstore.New(ctx, pool, &pgstore.Options{Migrate: true}) // creates the table dedup_records
	if err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (id text NOT NULL, amount int NOT NULL)`); err != nil {
		panic(err)
	}

	type Order struct {
		ID     string
		Amount int
	}
	handler, err := pgstore.TxHandler(s, func(ctx context.Context, tx pgx.Tx, o Order) (string, error) {
		_, err := tx.Exec(ctx, `INSERT INTO orders (id, amount) VALUES ($1, $2)`, o.ID, o.Amount)
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
	var n int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&n)
	fmt.Println("orders written:", n)
	// Output:
	// processed order o-1 stored ack
	// duplicate order o-1 stored ack
	// duplicate order o-1 stored ack
	// orders written: 1
}

// Cleanup deletes expired records in bounded batches; RunCleanup runs it
// on an interval until its context ends.
func ExampleStore_Cleanup() {
	ctx := context.Background()
	pool, drop := exampleSchema(ctx)
	defer drop()
	s, err := pgstore.New(ctx, pool, &pgstore.Options{CleanupBatchSize: 500, Migrate: true})
	if err != nil {
		panic(err)
	}
	_, _ = pool.Exec(ctx, `INSERT INTO dedup_records (key, state, token, attempt, expires_at)
		SELECT 'orders:' || g, 'completed', gen_random_uuid(), 1, now() - interval '1 hour' FROM generate_series(1, 1200) g`)

	// In a service: go s.RunCleanup(ctx, time.Minute), stopped by ctx.
	deleted, err := s.Cleanup(ctx)
	fmt.Println(deleted, err)
	// Output: 1200 <nil>
}
