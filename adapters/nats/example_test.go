package dedupnats_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

// runServer starts an embedded NATS server with JetStream for an example.
func runServer() (url string, stop func()) {
	dir, _ := os.MkdirTemp("", "dedupnats-example-")
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		panic(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		panic("nats-server did not start")
	}
	return srv.ClientURL(), func() { srv.Shutdown(); srv.WaitForShutdown(); _ = os.RemoveAll(dir) }
}

// A JetStream consumer wrapped by dedup: the order published twice (the
// second time without Nats-Msg-Id, so JetStream cannot tell) is charged
// once, keyed on the order id in its body.
func ExampleNewConsumer() {
	url, stop := runServer()
	defer stop()
	ctx := context.Background()
	nc, _ := natsgo.Connect(url)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	_, _ = js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders"}})
	// Dead letters need a stream of their own: Start checks.
	_, _ = js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS_DLQ", Subjects: []string{"dlq.orders"}})
	cons, _ := js.CreateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{
		Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 10,
	})
	for _, body := range []string{`{"id":"o-1","cents":500}`, `{"id":"o-2","cents":700}`, `{"id":"o-1","cents":500}`} {
		_, _ = js.Publish(ctx, "orders", []byte(body))
	}

	type Order struct {
		ID    string `json:"id"`
		Cents int    `json:"cents"`
	}
	var mu sync.Mutex
	charged := map[string]int{}
	var wg sync.WaitGroup
	wg.Add(3)
	charge := func(ctx context.Context, m *dedup.Message[Order]) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		charged[m.Body.ID] += m.Body.Cents
		return "receipt-" + m.Body.ID, nil
	}
	// The adapter reports what it did with each delivery to the receiver's
	// Observer.
	settled := delivery.ObserverFunc(func(_ context.Context, e delivery.Event) {
		if e.Settled {
			defer wg.Done()
			fmt.Println(e.Broker, e.Key, e.Decision.Reason)
		}
	})
	store, _ := memstore.New(nil)
	rcv, _ := dedup.NewReceiver(store, idstrategy.BodyField("id", func(o Order) string { return o.ID }), charge,
		&dedup.Config{Namespace: "billing", Observer: settled})
	c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{Concurrency: 1, DeadLetterSubject: "dlq.orders"})
	if err != nil {
		panic(err)
	}
	// Start's context is the consumer's lifetime: its end before Stop would
	// be a hard stop, reported by Err.
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	wg.Wait()
	// Stop on a context of its own, which bounds the drain.
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.Stop(stopCtx) // finishes what was fetched; at the deadline, cancels the handlers
	fmt.Println(charged)
	// Output:
	// jetstream billing:o-1 processed
	// jetstream billing:o-2 processed
	// jetstream billing:o-1 duplicate
	// map[o-1:500 o-2:700]
}

// A core NATS request sent twice with the same id is answered twice with
// the same reply; the handler runs once.
func ExampleNewSubscriber() {
	url, stop := runServer()
	defer stop()
	ctx := context.Background()
	nc, _ := natsgo.Connect(url)
	defer nc.Close()

	runs := 0
	quote := func(ctx context.Context, m *dedup.Message[[]byte]) ([]byte, error) {
		runs++ // one worker: no lock needed
		return fmt.Appendf(nil, "quote #%d for %s", runs, m.Body), nil
	}
	store, _ := memstore.New(nil)
	rcv, _ := dedup.NewReceiver(store, idstrategy.MessageHeader[[]byte]("Request-Id"), quote, &dedup.Config{Namespace: "quotes"})
	// A request that cannot be served gets a reply saying why, so there is
	// nothing to dead-letter: DropPoison says so explicitly.
	sub, _ := dedupnats.NewSubscriber(nc, "quotes", "", rcv, &dedupnats.Options{Concurrency: 1, Decoder: dedup.RawDecoder{}, DropPoison: true})
	if err := sub.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { // Stop on a context of its own, which bounds the drain
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = sub.Stop(stopCtx)
	}()

	for range 2 {
		req := natsgo.NewMsg("quotes")
		req.Header.Set("Request-Id", "req-42")
		req.Data = []byte("10 widgets")
		reply, err := nc.RequestMsg(req, 5*time.Second)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s (%s)\n", reply.Data, reply.Header.Get(dedupnats.HeaderStatus))
	}
	fmt.Println("handler runs:", runs)
	// Output:
	// quote #1 for 10 widgets (processed)
	// quote #1 for 10 widgets (duplicate)
	// handler runs: 1
}

// The handler sees where a JetStream message sits in its stream through the
// envelope, and reaches the jetstream.Msg for the rest (here, the consumer's
// name); it must leave the acknowledgement to the adapter.
func ExampleNativeJetStream() {
	url, stop := runServer()
	defer stop()
	ctx := context.Background()
	nc, _ := natsgo.Connect(url)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	_, _ = js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"}})
	cons, _ := js.CreateConsumer(ctx, "EVENTS", jetstream.ConsumerConfig{
		Durable: "audit", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 5,
	})
	m := natsgo.NewMsg("events.signup")
	m.Header.Set(jetstream.MsgIDHeader, "evt-1")
	m.Data = []byte("ada@example.com")
	_, _ = js.PublishMsg(ctx, m)

	done := make(chan struct{})
	audit := func(ctx context.Context, m *dedup.Message[string]) (struct{}, error) {
		defer close(done)
		fmt.Println(m.Broker, m.Source, m.Stream, m.Offset, m.DeliveryCount, m.ID, m.Body)
		if jm, ok := dedupnats.NativeJetStream(m); ok {
			meta, _ := jm.Metadata()
			fmt.Println("consumer", meta.Consumer)
		}
		_, core := dedupnats.Native(m)
		fmt.Println("core NATS:", core)
		return struct{}{}, nil
	}
	store, _ := memstore.New(nil)
	rcv, _ := dedup.NewReceiver(store, idstrategy.MessageID[string](), audit, &dedup.Config{Namespace: "audit"})
	c, _ := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{Decoder: dedup.RawDecoder{}, DropPoison: true})
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		panic("the message was not handled")
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // Stop's own
	defer cancel()
	_ = c.Stop(stopCtx)
	// Output:
	// jetstream events.signup EVENTS 1 1 evt-1 ada@example.com
	// consumer audit
	// core NATS: false
}

// The redelivery horizon of a consumer with a BackOff schedule: its last
// entry repeats up to MaxDeliver.
func ExampleHorizon() {
	h, bounded := dedupnats.Horizon(jetstream.ConsumerConfig{
		MaxDeliver: 5,
		BackOff:    []time.Duration{time.Second, 10 * time.Second, time.Minute},
	})
	fmt.Println(h, bounded)
	_, bounded = dedupnats.Horizon(jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: -1})
	fmt.Println(bounded)
	// Output:
	// 3m11s true
	// false
}
