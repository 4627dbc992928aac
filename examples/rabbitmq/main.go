// Command rabbitmq consumes a RabbitMQ queue through dedup, against the
// broker at $AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/). It
// declares a quorum queue under a random name with its dead-letter exchange
// and a retry tier, publishes orders (some twice, under another message
// id), a poison message and an order whose first charge fails, runs a
// consumer until every delivery is settled, prints what happened, deletes
// its queues and exits.
//
//	go -C examples/rabbitmq run .
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
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
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
	url := cmp.Or(os.Getenv("AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/")
	if err := run(ctx, url, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "rabbitmq example:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string, w io.Writer) error {
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

	b := make([]byte, 4)
	_, _ = rand.Read(b)
	const tier = 500 * time.Millisecond
	top := dedupamqp.Topology{
		Queue:      "example.orders." + hex.EncodeToString(b),
		Type:       dedupamqp.Quorum,
		RetryTiers: []time.Duration{tier},
	}
	if err := top.Declare(ctx, ch); err != nil {
		return err
	}
	defer func() {
		for _, q := range []string{top.Queue, top.Queue + ".dlq", adapter.RetryName(top.Queue, tier)} {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		_ = ch.ExchangeDelete(top.Queue+".dlx", false, false)
	}()

	// Five orders, each published twice (the second time under a fresh
	// message id, as a producer retrying blindly would), and a poison
	// message.
	pub, err := dedupamqp.NewPublisher(conn, nil)
	if err != nil {
		return err
	}
	defer pub.Close(ctx)
	for i := range 5 {
		data, _ := json.Marshal(Order{ID: fmt.Sprintf("order-%d", i), Cents: 100 * (i + 1)})
		for range 2 {
			if _, err := pub.Publish(ctx, "", top.Queue, amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: data}); err != nil {
				return err
			}
		}
	}
	if _, err := pub.Publish(ctx, "", top.Queue, amqp.Publishing{Body: []byte("not json")}); err != nil {
		return err
	}

	// The payment gateway times out once, on order-3: the retry goes
	// through the 500ms tier.
	var mu sync.Mutex
	charges := map[string]int{}
	var failedOnce atomic.Bool
	charge := func(ctx context.Context, m *dedup.Message[Order]) (string, error) {
		if m.Body.ID == "order-3" && failedOnce.CompareAndSwap(false, true) {
			return "", errors.New("payment gateway timeout")
		}
		mu.Lock()
		defer mu.Unlock()
		charges[m.Body.ID]++
		return "receipt-" + m.Body.ID, nil
	}
	// The consumer reports each delivery to the receiver's Observer once it
	// settled it: 11 deliveries, and the retried one once more.
	reasons := map[delivery.Reason]int{}
	var settled sync.WaitGroup
	settled.Add(12)
	observer := delivery.ObserverFunc(func(_ context.Context, e delivery.Event) {
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
		&dedup.Config{
			Namespace: "billing",
			Observer:  observer,
			Backoff:   dedup.BackoffFunc(func(int) time.Duration { return 2 * time.Second }),
			Logger:    slog.New(slog.DiscardHandler),
		})
	if err != nil {
		return err
	}
	opts := top.Options()
	opts.Concurrency = 1 // one at a time, so that the output is always the same
	c, err := dedupamqp.NewConsumer(url, top.Queue, rcv, opts)
	if err != nil {
		return err
	}
	// Start's context bounds the consumer's life: its end without Stop is a
	// hard stop, logged as an error. So the consumer runs until Stop, and
	// Stop gets a context of its own; ctx only bounds the wait.
	if err := c.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	stop := func() error {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return c.Stop(stopCtx)
	}
	all := make(chan struct{})
	go func() { settled.Wait(); close(all) }()
	select {
	case <-all:
	case <-ctx.Done():
		_ = stop()
		return fmt.Errorf("waiting for the queue to be consumed: %w", ctx.Err())
	}
	if err := stop(); err != nil {
		return err
	}

	mu.Lock()
	ids := make([]string, 0, len(charges))
	for id := range charges {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		fmt.Fprintf(w, "%s charged %d time(s)\n", id, charges[id])
	}
	fmt.Fprintf(w, "decisions: %v\n", reasons)
	mu.Unlock()
	st := c.Stats()
	fmt.Fprintf(w, "retried through the tier: %d, dead letters: %d\n", st.RetriedLater, st.DeadLettered)
	fmt.Fprintf(w, "consumer stats: %+v\n", st)

	dead, ok, err := ch.Get(top.Queue+".dlq", true)
	if err != nil || !ok {
		return fmt.Errorf("no dead letter (%v)", err)
	}
	fmt.Fprintf(w, "dead letter %q: reason %s\n", dead.Body, dead.Headers[delivery.HeaderReason])
	return nil
}
