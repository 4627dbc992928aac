package dedupkafka_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/dedup-go/dedup"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

// A kafka-go consumer-group reader wrapped by dedup, on an in-process
// cluster: the order produced twice (a producer retry, at another offset)
// is charged once, keyed on the Message-Id the dedupkafka.Writer stamped on
// it, and the partition is committed to its end when the consumer stops.
func ExampleNewConsumer() {
	cluster, _ := kfake.NewCluster(kfake.SeedTopics(1, "orders", "orders.dlq"), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	ctx := context.Background()

	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	w := &dedupkafka.Writer{W: &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: "orders", RequiredAcks: kafka.RequireAll, Transport: tr}}
	defer w.W.Close()
	orders := []kafka.Message{{Value: []byte(`{"id":"o-1","cents":500}`)}, {Value: []byte(`{"id":"o-2","cents":700}`)}}
	_ = w.WriteMessages(ctx, orders...)
	_ = w.WriteMessages(ctx, orders[0]) // the producer retries o-1: same Message-Id

	type Order struct {
		ID    string `json:"id"`
		Cents int    `json:"cents"`
	}
	var mu sync.Mutex
	charged := map[string]int{}
	charge := func(ctx context.Context, m *dedup.Message[Order]) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		charged[m.Body.ID] += m.Body.Cents
		return "receipt-" + m.Body.ID, nil
	}
	// The adapter reports each delivery, once settled, to the receiver's
	// Observer: where it came from and what was done with it.
	var wg sync.WaitGroup
	wg.Add(3)
	settled := delivery.ObserverFunc(func(_ context.Context, e delivery.Event) {
		defer wg.Done()
		fmt.Println(e.Broker, e.Stream, e.Partition, e.Offset, e.Decision.Reason, e.Settled)
	})
	store, _ := memstore.New(nil)
	rcv, _ := dedup.NewReceiver(store, idstrategy.MessageHeader[Order](dedupkafka.HeaderMessageID), charge,
		// The reader starts a group without offsets at the first offset, so the
		// records must outlive the topic's retention (kfake's: 7 days).
		&dedup.Config{Namespace: "billing", Retention: 7 * 24 * time.Hour, Observer: settled})
	// CommitInterval 0 (the default): the Consumer commits itself. The
	// reader stays ours: we close it, after Stop (defers run last first).
	reader := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, GroupID: "billing", Topic: "orders", MaxWait: 100 * time.Millisecond})
	defer reader.Close()
	c, err := dedupkafka.NewConsumer(reader, rcv, &dedupkafka.Options{DeadLetterTopic: "orders.dlq"})
	if err != nil {
		panic(err)
	}
	// Start's context is the consumer's life (its end without Stop is a
	// hard stop, logged at error level); Stop gets a context of its own.
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	wg.Wait()
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Stop(stopCtx); err != nil {
		panic(err)
	}
	fmt.Println(charged)
	// Output:
	// kafka orders 0 0 processed true
	// kafka orders 0 1 processed true
	// kafka orders 0 2 duplicate true
	// map[o-1:500 o-2:700]
}
