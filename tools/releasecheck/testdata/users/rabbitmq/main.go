// A RabbitMQ program: the topology, a confirming publisher and a consumer
// wrapped by dedup. It connects only when run with the argument "run".
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
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
	fmt.Println(adapter.RetryName("orders", 5*time.Second), dedupamqp.Classic)
}

func run(ctx context.Context, url string) error {
	conn, err := amqp.Dial(url)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	top := dedupamqp.Topology{Queue: "orders", RetryTiers: []time.Duration{5 * time.Second}}
	if err := top.Declare(ctx, ch); err != nil {
		return err
	}
	pub, err := dedupamqp.NewPublisher(conn, nil)
	if err != nil {
		return err
	}
	defer pub.Close(ctx)
	if _, err := pub.Publish(ctx, "", top.Queue, amqp.Publishing{ContentType: "application/json", Body: []byte(`{"id":"o-1"}`)}); err != nil {
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
	opts := top.Options()
	opts.Concurrency = 1
	c, err := dedupamqp.NewConsumer(url, top.Queue, rcv, opts)
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	return c.Stop(ctx)
}
