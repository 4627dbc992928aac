// A MySQL or MariaDB program: the mysqlstore store, and a handler that
// completes the message's record in the transaction that writes the
// order. It connects only when run with the argument "run".
package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"

	_ "github.com/go-sql-driver/mysql"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/store/mysqlstore"
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
	fmt.Println(mysqlstore.DefaultTable, mysqlstore.MaxKeyLength)
}

func run(ctx context.Context, dsn string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	s, err := mysqlstore.New(ctx, db, &mysqlstore.Options{Table: mysqlstore.DefaultTable, Migrate: true})
	if err != nil {
		return err
	}
	defer s.Close()
	handler, err := mysqlstore.TxHandler(s, func(ctx context.Context, tx *sql.Tx, o order) (string, error) {
		_, err := tx.ExecContext(ctx, `INSERT INTO orders (id, amount) VALUES (?, ?)`, o.ID, o.Amount)
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
