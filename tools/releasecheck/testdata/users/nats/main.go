// A NATS program: a JetStream consumer and a core-NATS subscriber wrapped
// by dedup. It connects only when run with the argument "run".
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

type order struct {
	ID    string `json:"id"`
	Cents int    `json:"cents"`
}

func main() {
	if len(os.Args) > 2 && os.Args[1] == "run" {
		if err := run(context.Background(), os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	h, ok := dedupnats.Horizon(jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 5})
	fmt.Println("redeliveries end within", h, ok)
}

func run(ctx context.Context, url string) error {
	nc, err := natsgo.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.CreateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		return err
	}
	st, err := memstore.New(nil)
	if err != nil {
		return err
	}
	charge := func(ctx context.Context, m *dedup.Message[order]) (string, error) {
		return "receipt-" + m.Body.ID, nil
	}
	rcv, err := dedup.NewReceiver(st, idstrategy.BodyField("id", func(o order) string { return o.ID }), charge,
		&dedup.Config{Namespace: "billing"})
	if err != nil {
		return err
	}
	c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{Concurrency: 1})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = c.Stop(ctx) }()
	sub, err := dedupnats.NewSubscriber(nc, "orders.core", "billing", rcv, nil)
	if err != nil {
		return err
	}
	if err := sub.Start(ctx); err != nil {
		return err
	}
	return sub.Stop(ctx)
}
