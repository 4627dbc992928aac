package dedupfranz_test

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedup-go/dedup"
	dedupfranz "github.com/dedup-go/dedup/adapters/franz"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

// A record produced twice with one Message-Id has one effect.
func Example() {
	cluster, _ := kfake.NewCluster(kfake.SeedTopics(1, "orders", "orders.dlq"))
	defer cluster.Close()
	brokers := cluster.ListenAddrs()

	prod, _ := kgo.NewClient(kgo.SeedBrokers(brokers...))
	defer prod.Close()
	r := &kgo.Record{Topic: "orders", Value: []byte(`{"id":"o-1","cents":250}`)}
	dedupfranz.StampMessageID([]*kgo.Record{r}, nil)
	again := *r // the same record produced again (a retry after a timeout)
	_ = prod.ProduceSync(context.Background(), r, &again).FirstErr()

	store, _ := memstore.New(nil)
	done := make(chan struct{}, 2)
	charge := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		fmt.Println("charged", m.Body.ID, m.Body.Cents)
		return Receipt{OrderID: m.Body.ID}, nil
	}
	rcv, _ := dedup.NewReceiver(store, idstrategy.MessageHeader[Order](dedupfranz.HeaderMessageID), charge,
		&dedup.Config{Namespace: "billing", Observer: dedupObserver(done)})
	c, err := dedupfranz.NewConsumer([]kgo.Opt{kgo.SeedBrokers(brokers...)}, "billing", []string{"orders"}, rcv,
		&dedupfranz.Options{DeadLetterTopic: "orders.dlq"})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = c.Start(context.Background())
	for range 2 {
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			fmt.Println("timed out")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.Stop(ctx)
	s := c.Stats()
	fmt.Println("delivered", s.Delivered, "acked", s.Acked)
	// Output:
	// charged o-1 250
	// delivered 2 acked 2
}
