package dedupnats_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

// fakeDelivery is a message of a made-up broker: a queue, headers, a body.
type fakeDelivery struct {
	Queue   string
	Headers map[string][]string
	Body    []byte
}

// fakeConsumer is the whole of a broker adapter, for a broker without
// acknowledgements: it fills the envelope, decodes the body, hands the
// message to the receiver (Deliver; Refused for a body that does not
// decode), carries out the decision and reports what it did (Settled): the
// Observer hears of the delivery once. A RabbitMQ or Kafka adapter does the
// same, acking, retrying or dead-lettering with its broker's calls.
type fakeConsumer[T, R any] struct {
	rcv *adapter.Receiver[*dedup.Message[T], R]
}

func (c fakeConsumer[T, R]) deliver(ctx context.Context, d fakeDelivery) delivery.Decision {
	m := &dedup.Message[T]{
		Data:          d.Body,
		Header:        delivery.MapHeader(d.Headers),
		Source:        d.Queue,
		DeliveryCount: 1,
		Timestamp:     time.Now(),
		Broker:        "fake",
	}
	var dlv adapter.Delivery[R]
	if err := adapter.DecodeBody(dedup.JSONDecoder{}, m); err != nil {
		dlv = c.rcv.Refused(ctx, m, err)
	} else {
		dlv = c.rcv.Deliver(ctx, m)
	}
	// Nothing to acknowledge on this broker: the decision is carried out
	// at once.
	dlv.Settled(adapter.Settlement{})
	return dlv.Decision
}

// One Receiver and one handler serve a JetStream consumer and a consumer of
// another broker at the same time. The same order arrives once through
// each: it is charged once, and the other delivery is answered as a
// duplicate, whichever broker came first.
func Example_multiBroker() {
	url, stop := runServer()
	defer stop()
	ctx := context.Background()
	nc, _ := natsgo.Connect(url)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	_, _ = js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders"}})
	cons, _ := js.CreateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{
		Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 10,
	})

	type Order struct {
		ID    string `json:"id"`
		Cents int    `json:"cents"`
	}
	// The one handler: it sees the broker-neutral envelope.
	var charges atomic.Int64
	charge := func(ctx context.Context, m *dedup.Message[Order]) (string, error) {
		charges.Add(1)
		return "receipt-" + m.Body.ID, nil
	}
	// Both adapters report each delivery to the receiver's one Observer.
	var mu sync.Mutex
	var statuses, brokers []string
	var both sync.WaitGroup
	both.Add(2)
	observer := delivery.ObserverFunc(func(_ context.Context, e delivery.Event) {
		if !e.Settled {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		statuses = append(statuses, e.Status.String())
		brokers = append(brokers, e.Broker+" "+e.Source)
		both.Done()
	})
	store, _ := memstore.New(nil)
	rcv, _ := dedup.NewReceiver(store, idstrategy.BodyField("id", func(o Order) string { return o.ID }), charge,
		&dedup.Config{Namespace: "billing", Observer: observer})

	// The JetStream consumer and the fake one, on the same receiver.
	_, _ = js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS_DLQ", Subjects: []string{"dlq.orders"}})
	c, _ := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DeadLetterSubject: "dlq.orders"})
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { // Stop on a context of its own, which bounds the drain
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(stopCtx)
	}()
	fake := fakeConsumer[Order, string]{rcv: adapter.Bind(rcv)}

	body := []byte(`{"id":"o-1","cents":500}`)
	_, _ = js.Publish(ctx, "orders", body)
	go fake.deliver(ctx, fakeDelivery{Queue: "payments", Headers: map[string][]string{"Content-Type": {"application/json"}}, Body: body})

	done := make(chan struct{})
	go func() { both.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		panic("the deliveries were not settled")
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(statuses)
	slices.Sort(brokers)
	fmt.Println("charges:", charges.Load())
	fmt.Println("statuses:", statuses)
	fmt.Println("brokers:", brokers)
	// Output:
	// charges: 1
	// statuses: [duplicate processed]
	// brokers: [fake payments jetstream orders]
}
