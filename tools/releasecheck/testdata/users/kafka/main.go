// A Kafka consumer's program: a kafka-go reader wrapped by dedup, and the
// writer that stamps a Message-Id on each message. It connects only when
// run with the argument "run".
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

type order struct {
	ID    string `json:"id"`
	Cents int    `json:"cents"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "run" {
		if err := run(context.Background(), os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	fmt.Println(dedupkafka.HeaderMessageID, adapter.RetryName("orders", time.Minute))
}

func run(ctx context.Context, brokers []string) error {
	st, err := memstore.New(nil)
	if err != nil {
		return err
	}
	charge := func(ctx context.Context, m *dedup.Message[order]) (string, error) {
		return "receipt-" + m.Body.ID, nil
	}
	rcv, err := dedup.NewReceiver(st, idstrategy.MessageHeader[order](dedupkafka.HeaderMessageID), charge,
		&dedup.Config{Namespace: "billing", Retention: 7 * 24 * time.Hour})
	if err != nil {
		return err
	}
	w := &dedupkafka.Writer{W: &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: "orders", RequiredAcks: kafka.RequireAll}}
	defer w.W.Close()
	if err := w.WriteMessages(ctx, kafka.Message{Value: []byte(`{"id":"o-1","cents":500}`)}); err != nil {
		return err
	}
	reader := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, GroupID: "billing", Topic: "orders"})
	c, err := dedupkafka.NewConsumer(reader, rcv, &dedupkafka.Options{DeadLetterTopic: "orders.dlq"})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	time.Sleep(time.Second)
	return c.Stop(ctx)
}
