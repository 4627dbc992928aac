// A Redis program on rueidis: the rueidisstore store behind a receiver.
// It connects only when run with the argument "run".
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/redis/rueidis"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/store/rueidisstore"
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
	fmt.Println(rueidisstore.DefaultPrefix, rueidisstore.DefaultTimeout)
}

func run(ctx context.Context, addr string) error {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return err
	}
	defer client.Close()
	s, err := rueidisstore.New(ctx, client, nil)
	if err != nil {
		return err
	}
	rcv, err := dedup.NewReceiver(s, func(o order) (string, error) { return o.ID, nil },
		func(ctx context.Context, o order) (string, error) { return "order " + o.ID + " charged", nil },
		&dedup.Config{Namespace: "orders"})
	if err != nil {
		return err
	}
	res, err := rcv.Handle(ctx, order{ID: "o-1", Amount: 42})
	fmt.Println(res.Status, res.Value, err)
	return nil
}
