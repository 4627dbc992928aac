// Command nats consumes a JetStream stream and answers core NATS requests
// through dedup, against the NATS server at $NATS_URL (default
// nats://127.0.0.1:4222, JetStream enabled). It creates its own stream under
// a random name, publishes orders with duplicates and a poison message,
// prints what happened, deletes the stream and exits.
//
//	go -C examples run ./nats
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

// Order is the message the producers publish.
type Order struct {
	ID    string `json:"id"`
	Cents int    `json:"cents"`
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := cmp.Or(os.Getenv("NATS_URL"), natsgo.DefaultURL)
	if err := run(ctx, url, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "nats example:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string, w io.Writer) error {
	nc, err := natsgo.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	suffix := hex.EncodeToString(b)
	stream, subject, dlq := "EXAMPLE_ORDERS_"+suffix, "example."+suffix+".orders", "example."+suffix+".dlq"
	// Dead letters need a stream of their own: the consumer's stream must
	// not capture them (it would read them back), and without a stream
	// they would be lost; Start checks both.
	for name, subj := range map[string]string{stream: subject, stream + "_DLQ": dlq} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subj}}); err != nil {
			return err
		}
		defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), name) }()
	}
	cons, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 10,
	})
	if err != nil {
		return err
	}

	// JetStream: ten orders, each published twice (the copy without
	// Nats-Msg-Id), and one poison message.
	for i := range 10 {
		data, _ := json.Marshal(Order{ID: fmt.Sprintf("order-%d", i), Cents: 100 * i})
		m := natsgo.NewMsg(subject)
		m.Data = data
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("order-%d", i))
		if _, err := js.PublishMsg(ctx, m); err != nil {
			return err
		}
		if _, err := js.Publish(ctx, subject, data); err != nil {
			return err
		}
	}
	if _, err := js.Publish(ctx, subject, []byte("not json")); err != nil {
		return err
	}

	var charges atomic.Int64
	charge := func(ctx context.Context, m *dedup.Message[Order]) (string, error) {
		charges.Add(1)
		return "receipt-" + m.Body.ID, nil
	}
	// The consumer reports what it did with each delivery to the
	// receiver's Observer.
	var mu sync.Mutex
	reasons := map[delivery.Reason]int{}
	var settled sync.WaitGroup
	settled.Add(21)
	observer := delivery.ObserverFunc(func(_ context.Context, e delivery.Event) {
		if !e.Settled {
			return
		}
		mu.Lock()
		reasons[e.Decision.Reason]++
		mu.Unlock()
		settled.Done()
	})
	store, err := memstore.New(nil)
	if err != nil {
		return err
	}
	rcv, err := dedup.NewReceiver(store, idstrategy.BodyField("id", func(o Order) string { return o.ID }), charge,
		&dedup.Config{Namespace: "billing", Observer: observer})
	if err != nil {
		return err
	}
	c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DeadLetterSubject: dlq})
	if err != nil {
		return err
	}
	// Start's context is the consumer's lifetime: its end before Stop would
	// be a hard stop (reported by Err), so it is not ctx, whose timeout
	// bounds the waiting below. Stop gets a context of its own, which
	// bounds the drain.
	if err := c.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	all := make(chan struct{})
	go func() { settled.Wait(); close(all) }()
	select {
	case <-all:
	case <-ctx.Done():
		_ = stop(c)
		return fmt.Errorf("waiting for the stream to be consumed: %w", ctx.Err())
	}
	if err := stop(c); err != nil {
		return err
	}
	fmt.Fprintf(w, "JetStream: 21 messages, %d charges; decisions %v\n", charges.Load(), reasons)

	// Core NATS: the same request twice gets the same reply.
	quotes := 0
	quote := func(ctx context.Context, m *dedup.Message[Order]) (string, error) {
		quotes++ // Concurrency 1
		return fmt.Sprintf("quote #%d: %d cents", quotes, m.Body.Cents), nil
	}
	qrcv, err := dedup.NewReceiver(store, idstrategy.MessageHeader[Order]("Request-Id"), quote, &dedup.Config{Namespace: "quotes"})
	if err != nil {
		return err
	}
	// A poison request gets a reply saying why; DropPoison says that
	// nothing else needs to keep it.
	sub, err := dedupnats.NewSubscriber(nc, "example."+suffix+".quote", "", qrcv, &dedupnats.Options{Concurrency: 1, DropPoison: true})
	if err != nil {
		return err
	}
	if err := sub.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	defer func() { _ = stop(sub) }()
	for range 2 {
		req := natsgo.NewMsg("example." + suffix + ".quote")
		req.Header.Set("Request-Id", "q-1")
		req.Data, _ = json.Marshal(Order{ID: "order-1", Cents: 4200})
		reply, err := nc.RequestMsg(req, 5*time.Second)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "core request q-1: %s (%s)\n", reply.Data, reply.Header.Get(dedupnats.HeaderStatus))
	}
	fmt.Fprintf(w, "quote handler ran %d time(s)\n", quotes)
	return nil
}

// stop stops a consumer or subscriber on a context of its own, which bounds
// the drain, and returns why it stopped early if nobody had asked it to
// (its consumer deleted, the connection closed).
func stop(s interface {
	Stop(context.Context) error
	Err() error
}) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(s.Stop(ctx), s.Err())
}
