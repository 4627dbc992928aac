// A PostgreSQL program: the pgstore store, and a handler that completes
// the message's record in the transaction that writes the order. It
// connects only when run with the argument "run".
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/store/pgstore"
)

type order struct {
	ID     string
	Amount int
}

func main() {
	if len(os.Args) > 2 && os.Args[1] == "run" {
		if err := run(context.Background(), os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	fmt.Println(pgstore.DefaultTable, pgstore.MaxKeyLength)
}

func run(ctx context.Context, dsn string) error {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	s, err := pgstore.New(ctx, pool, &pgstore.Options{Table: pgstore.DefaultTable})
	if err != nil {
		return err
	}
	if err := s.Migrate(ctx); err != nil {
		return err
	}
	handler, err := pgstore.TxHandler(s, func(ctx context.Context, tx pgx.Tx, o order) (string, error) {
		_, err := tx.Exec(ctx, `INSERT INTO orders (id, amount) VALUES ($1, $2)`, o.ID, o.Amount)
		return "order " + o.ID + " stored", err
	}, nil)
	if err != nil {
		return err
	}
	rcv, err := dedup.NewReceiver(s, func(o order) (string, error) { return o.ID, nil }, handler,
		&dedup.Config{Namespace: "orders"})
	if err != nil {
		return err
	}
	res, err := rcv.Handle(ctx, order{ID: "o-1", Amount: 42})
	fmt.Println(res.Status, res.Value, err)
	return nil
}
