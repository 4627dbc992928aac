// Command kafka consumes a Kafka topic through dedup, against the brokers
// at $KAFKA_BROKERS (comma-separated; default 127.0.0.1:9092). It creates a
// topic of three partitions (and its dead-letter topic) under a random
// name, produces orders (some of them twice, as a producer retrying a write
// would, and one that is not JSON), consumes them in a consumer group with
// a dedup.Receiver, prints what happened, deletes the topics and exits.
//
//	KAFKA_BROKERS=127.0.0.1:9092 go -C examples/kafka run .
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dedup-go/dedup"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

// Order is the message the producer writes.
type Order struct {
	ID    string `json:"id"`
	Cents int    `json:"cents"`
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	brokers := strings.Split(cmp.Or(os.Getenv("KAFKA_BROKERS"), "127.0.0.1:9092"), ",")
	if err := run(ctx, brokers, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kafka example:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, brokers []string, w io.Writer) error {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	topic := "dedup-example-orders-" + hex.EncodeToString(b)
	dlq := topic + ".dlq"
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	admin := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr}
	if err := createTopics(ctx, admin, topic, dlq); err != nil {
		return err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = admin.DeleteTopics(dctx, &kafka.DeleteTopicsRequest{Topics: []string{topic, dlq}})
	}()

	// The producer: a dedupkafka.Writer stamps a Message-Id on each order,
	// so that writing the same messages again (a retry after a timeout,
	// which kafka-go cannot make idempotent) keeps their ids.
	out := &dedupkafka.Writer{W: &kafka.Writer{
		Addr: kafka.TCP(brokers...), Topic: topic, Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll, Transport: tr,
	}}
	defer out.Close(context.WithoutCancel(ctx)) // writes what it holds, then closes the kafka.Writer
	var orders []kafka.Message
	for i := range 6 {
		data, _ := json.Marshal(Order{ID: fmt.Sprintf("o-%d", i+1), Cents: 100 * (i + 1)})
		orders = append(orders, kafka.Message{Key: fmt.Appendf(nil, "o-%d", i+1), Value: data})
	}
	if err := out.WriteMessages(ctx, orders...); err != nil {
		return err
	}
	if err := out.WriteMessages(ctx, orders[1], orders[4]); err != nil { // the retry
		return err
	}
	if err := out.WriteMessages(ctx, kafka.Message{Key: []byte("bad"), Value: []byte("not json")}); err != nil {
		return err
	}
	const total = 6 + 2 + 1

	// The consumer.
	var mu sync.Mutex
	charged := map[string]int{}
	reasons := map[delivery.Reason]int{}
	dead := 0
	var settled sync.WaitGroup
	settled.Add(total)
	charge := func(ctx context.Context, m *dedup.Message[Order]) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		charged[m.Body.ID] += m.Body.Cents
		return "receipt-" + m.Body.ID, nil
	}
	// The Observer hears of each delivery once, when the adapter settled
	// it. A retry in place is a delivery of its own: only final outcomes
	// (acked, dead-lettered) count here.
	observer := delivery.ObserverFunc(func(_ context.Context, e delivery.Event) {
		if e.Decision.Action == delivery.Retry {
			return
		}
		mu.Lock()
		reasons[e.Decision.Reason]++
		if e.Decision.Action == delivery.DeadLetter {
			dead++
		}
		mu.Unlock()
		settled.Done()
	})
	store, err := memstore.New(nil)
	if err != nil {
		return err
	}
	rcv, err := dedup.NewReceiver(store, idstrategy.MessageHeader[Order](dedupkafka.HeaderMessageID), charge, &dedup.Config{
		Namespace: "billing",
		Retention: 7 * 24 * time.Hour, // the topic's retention: the reader starts a new group at the first offset
		Observer:  observer,
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		return err
	}
	// The reader is ours: the Consumer never closes it. It is closed after
	// Stop (this defer runs after the Stop calls below), which leaves the
	// consumer group.
	reader := kafka.NewReader(kafka.ReaderConfig{
		Brokers: brokers, GroupID: "billing-" + topic, Topic: topic, MaxWait: 250 * time.Millisecond,
	})
	defer reader.Close()
	c, err := dedupkafka.NewConsumer(reader, rcv, &dedupkafka.Options{DeadLetterTopic: dlq})
	if err != nil {
		return err
	}
	// Start's context is the consumer's life: when it ends without Stop,
	// the consumer hard-stops (logged at error level, Err set). ctx has a
	// deadline, so the consumer gets a context of its own, ended only by
	// Stop, and Stop a context of its own too.
	if err := c.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	stop := func() error {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return c.Stop(stopCtx)
	}
	all := make(chan struct{})
	go func() { settled.Wait(); close(all) }() // ends once every message settled
	select {
	case <-all:
	case <-ctx.Done():
		_ = stop()
		return fmt.Errorf("not every message was settled: %w", ctx.Err())
	}
	if err := stop(); err != nil {
		return err
	}

	mu.Lock()
	defer mu.Unlock()
	fmt.Fprintf(w, "%d messages: %d processed, %d duplicates, %d dead-lettered (%d undecodable)\n", total,
		reasons[delivery.ReasonProcessed], reasons[delivery.ReasonDuplicate], dead, reasons[delivery.ReasonUndecodable])
	st := c.Stats() // the dedup.ConsumerStats every adapter returns
	fmt.Fprintf(w, "consumer: %d delivered, %d acked, %d dead-lettered, %d settle failures\n",
		st.Delivered, st.Acked, st.DeadLettered, st.SettleFailures)
	for _, id := range slices.Sorted(func(yield func(string) bool) {
		for id := range charged {
			if !yield(id) {
				return
			}
		}
	}) {
		fmt.Fprintf(w, "%s charged %d\n", id, charged[id])
	}
	return nil
}

func createTopics(ctx context.Context, admin *kafka.Client, topics ...string) error {
	req := &kafka.CreateTopicsRequest{}
	for _, t := range topics {
		req.Topics = append(req.Topics, kafka.TopicConfig{Topic: t, NumPartitions: 3, ReplicationFactor: 1})
	}
	resp, err := admin.CreateTopics(ctx, req)
	if err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	for t, err := range resp.Errors {
		if err != nil {
			return fmt.Errorf("create topic %s: %w", t, err)
		}
	}
	return nil
}
