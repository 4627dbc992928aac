package dedupamqp_test

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

// A RabbitMQ consumer wrapped by dedup: the order published twice under two
// message ids is charged once, keyed on the order id in its body, and the
// message that is not JSON goes to the dead-letter queue with its reason.
// It runs against the RabbitMQ at $DEDUP_TEST_AMQP (default
// amqp://guest:guest@127.0.0.1:5672/).
func ExampleNewConsumer() {
	ctx := context.Background()
	url := rabbitURL()
	conn, err := amqp.Dial(url)
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	defer ch.Close()

	// The work queue, its dead-letter exchange and queue, and a retry tier.
	top := dedupamqp.Topology{Queue: "example.orders." + suffix(), RetryTiers: []time.Duration{5 * time.Second}}
	if err := top.Declare(ctx, ch); err != nil {
		panic(err)
	}
	defer func() {
		for _, q := range []string{top.Queue, top.Queue + ".dlq", adapter.RetryName(top.Queue, 5*time.Second)} {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		_ = ch.ExchangeDelete(top.Queue+".dlx", false, false)
	}()

	// Producers publish with a MessageId and confirms.
	pub, _ := dedupamqp.NewPublisher(conn, nil)
	defer pub.Close(ctx)
	for _, body := range []string{`{"id":"o-1","cents":500}`, `{"id":"o-2","cents":700}`, `{"id":"o-1","cents":500}`, `not json`} {
		if _, err := pub.Publish(ctx, "", top.Queue, amqp.Publishing{ContentType: "application/json", Body: []byte(body)}); err != nil {
			panic(err)
		}
	}

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
	// The consumer reports each delivery, once settled, to the receiver's
	// Observer: where it came from and what was done with it.
	var wg sync.WaitGroup
	wg.Add(4)
	settled := delivery.ObserverFunc(func(_ context.Context, e delivery.Event) {
		defer wg.Done()
		fmt.Println(e.Broker, e.Decision.Action, e.Decision.Reason, cmp.Or(e.Key, "(no key)"), e.Settled)
	})
	store, _ := memstore.New(nil)
	rcv, _ := dedup.NewReceiver(store, idstrategy.BodyField("id", func(o Order) string { return o.ID }), charge,
		&dedup.Config{Namespace: "billing", Observer: settled})
	opts := top.Options() // the dead-letter exchange and the retry tiers
	opts.Concurrency = 1
	c, err := dedupamqp.NewConsumer(url, top.Queue, rcv, opts)
	if err != nil {
		panic(err)
	}
	// Start's context lasts as long as the consumer: its end without Stop
	// would be a hard stop (an error). Stop gets a context of its own.
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

	dead, _, _ := ch.Get(top.Queue+".dlq", true)
	fmt.Printf("dead letter %q: %s\n", dead.Body, dead.Headers[delivery.HeaderReason])
	// Output:
	// rabbitmq ack processed billing:o-1 true
	// rabbitmq ack processed billing:o-2 true
	// rabbitmq ack duplicate billing:o-1 true
	// rabbitmq dead-letter undecodable (no key) true
	// map[o-1:500 o-2:700]
	// dead letter "not json": undecodable
}
