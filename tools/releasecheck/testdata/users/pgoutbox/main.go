// A program with a transactional outbox: a handler that writes an order
// and the event announcing it in one transaction, and the id the event
// gets. It connects only when run with the argument "run".
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store/pgoutbox"
	"github.com/dedup-go/dedup/store/pgstore"
)

type order struct{ ID string }

func main() {
	if len(os.Args) > 2 && os.Args[1] == "run" {
		if err := run(context.Background(), os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	fmt.Println(outbox.MessageID("orders:o-1", "created"))
}

func run(ctx context.Context, dsn string) error {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	s, err := pgstore.New(ctx, pool, &pgstore.Options{Migrate: true})
	if err != nil {
		return err
	}
	ob, err := pgoutbox.New(ctx, pool, nil)
	if err != nil {
		return err
	}
	handler, err := pgstore.TxHandler(s, func(ctx context.Context, tx pgx.Tx, o order) (string, error) {
		w, err := ob.Writer(ctx, tx)
		if err != nil {
			return "", err
		}
		return w.Add(ctx, pgoutbox.Message{Destination: "orders.created", OrderingKey: o.ID, Body: []byte(o.ID)})
	}, nil)
	if err != nil {
		return err
	}
	rcv, err := dedup.NewReceiver(s, func(o order) (string, error) { return o.ID, nil }, handler,
		&dedup.Config{Namespace: "orders"})
	if err != nil {
		return err
	}
	res, err := rcv.Handle(ctx, order{ID: "o-1"})
	fmt.Println(res.Status, res.Value, err)
	return nil
}
