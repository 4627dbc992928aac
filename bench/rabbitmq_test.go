package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedup-go/dedup"
	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
)

// Every RabbitMQ side has 8 workers and 64 unacknowledged deliveries in
// flight, and acknowledges each message on its own (manual acks).
const (
	amqpWorkers  = 8
	amqpPrefetch = 64
)

// amqpRun declares a queue of its own (the adapter's topology: a classic
// durable queue with its dead-letter exchange and queue), publishes n
// transient orders to it with confirms, runs consume on it, checks that
// every order was handled once and the queue is empty, and deletes it.
// The rate is the tally's, from the first order handled to the last:
// connecting and subscribing before (each side opens one connection), and
// cancelling the subscription and closing after, are outside the clock.
func amqpRun(tb testing.TB, url string, n int, side string, consume func(queue string, t *tally)) sample {
	ctx := context.Background()
	conn, err := amqp.Dial(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		tb.Fatal(err)
	}
	top := dedupamqp.Topology{Queue: uniqueName("amqp")}
	if err := top.Declare(ctx, ch); err != nil {
		tb.Fatal(err)
	}
	defer func() {
		for _, q := range []string{top.Queue, top.Queue + ".dlq"} {
			if _, err := ch.QueueDelete(q, false, false, false); err != nil {
				tb.Errorf("delete queue %s: %v", q, err)
			}
		}
		if err := ch.ExchangeDelete(top.Queue+".dlx", false, false); err != nil {
			tb.Errorf("delete exchange %s.dlx: %v", top.Queue, err)
		}
	}()
	publishAMQP(tb, ch, top.Queue, n)
	t := newTally(n)
	consume(top.Queue, t)
	s := t.sample()
	t.check(tb, side)
	q, err := ch.QueueDeclarePassive(top.Queue, true, false, false, false, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if q.Messages != 0 {
		tb.Fatalf("%s: %d messages left in the queue", side, q.Messages)
	}
	return s
}

// publishAMQP publishes n orders to queue and waits for their confirms.
// Each carries its id as its message id and as Watermill's UUID header,
// the key of Watermill's Deduplicator.
func publishAMQP(tb testing.TB, ch *amqp.Channel, queue string, n int) {
	if err := ch.Confirm(false); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	bodies, keys := ordersJSON(n)
	pending := make([]*amqp.DeferredConfirmation, 0, n)
	for i, body := range bodies {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
			DeliveryMode: amqp.Transient, MessageId: keys[i], Body: body,
			Headers: amqp.Table{wamqp.DefaultMessageUUIDHeaderKey: keys[i]},
		})
		if err != nil {
			tb.Fatal(err)
		}
		pending = append(pending, dc)
	}
	for _, dc := range pending {
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			tb.Fatalf("publish not confirmed: %v", err)
		}
	}
}

// bareAMQP is the consumer a user would write with amqp091-go: one channel
// with prefetch 64, 8 workers decoding, handling and acknowledging.
func bareAMQP(tb testing.TB, url, queue string, t *tally) {
	conn, err := amqp.Dial(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		tb.Fatal(err)
	}
	if err := ch.Qos(amqpPrefetch, 0, false); err != nil {
		tb.Fatal(err)
	}
	deliveries, err := ch.Consume(queue, "bare", false, false, false, false, nil)
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	for range amqpWorkers {
		wg.Go(func() {
			for d := range deliveries {
				o, err := decode(d.Body)
				if err != nil {
					_ = d.Reject(false)
					continue
				}
				t.add(o)
				_ = d.Ack(false)
			}
		})
	}
	testenv.Recv(tb, t.done, "every order consumed")
	if err := ch.Cancel("bare", false); err != nil {
		tb.Fatal(err)
	}
	testenv.Wait(tb, &wg, "the workers")
}

// dedupAMQP is the adapter's Consumer over memstore, with the same workers
// and prefetch.
func dedupAMQP(tb testing.TB, url, queue string, t *tally) {
	rcv, err := dedup.NewReceiver(orderStore(tb, t.n), idstrategy.BodyField("id", func(o order) string { return o.ID }),
		func(_ context.Context, m *dedup.Message[order]) (struct{}, error) {
			t.add(m.Body)
			return struct{}{}, nil
		}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	c, err := dedupamqp.NewConsumer(url, queue, rcv, &dedupamqp.Options{
		Concurrency: amqpWorkers, Prefetch: amqpPrefetch, DeadLetterExchange: queue + ".dlx",
	})
	if err != nil {
		tb.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	testenv.Recv(tb, t.done, "every order consumed")
	ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		tb.Fatal(err)
	}
}

// noTopology leaves the queue as amqpRun declared it: Watermill's own
// declaration (a queue without the dead-letter arguments) would be
// refused by the broker.
type noTopology struct{}

func (noTopology) BuildTopology(*amqp.Channel, wamqp.BuildTopologyParams, wamqp.Config, watermill.LoggerAdapter) error {
	return nil
}

func (noTopology) ExchangeDeclare(*amqp.Channel, string, wamqp.Config) error { return nil }

// watermillAMQP is the peer a user would pick instead: Watermill's AMQP
// subscriber under a message router with its Deduplicator middleware,
// keyed by the message UUID. A Watermill subscription hands over one
// message at a time, so 8 handlers on the queue, each with prefetch 8,
// are the 8 workers with 64 deliveries in flight.
func watermillAMQP(tb testing.TB, url, queue string, t *tally) {
	cfg := wamqp.NewDurableQueueConfig(url)
	cfg.TopologyBuilder = noTopology{}
	cfg.Consume.Qos.PrefetchCount = amqpPrefetch / amqpWorkers
	sub, err := wamqp.NewSubscriber(cfg, watermill.NopLogger{})
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = sub.Close() }()
	runWatermill(tb, queue, sub, amqpWorkers, t)
	// Closing the subscriber closes its connection, after the clock (which
	// stopped at the last order handled), as the other sides close theirs.
	if err := sub.Close(); err != nil {
		tb.Fatal(err)
	}
}

// runWatermill runs a router with handlers subscriptions of topic on sub,
// behind Watermill's Deduplicator keyed by the message UUID, until every
// order is handled, and closes it.
func runWatermill(tb testing.TB, topic string, sub message.Subscriber, handlers int, t *tally) {
	repo, err := middleware.NewMapExpiringKeyRepository(time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	d := &middleware.Deduplicator{Repository: repo, Timeout: time.Minute,
		KeyFactory: func(m *message.Message) (string, error) { return m.UUID, nil }}
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: testenv.WaitTimeout}, watermill.NopLogger{})
	if err != nil {
		tb.Fatal(err)
	}
	r.AddMiddleware(d.Middleware)
	for i := range handlers {
		r.AddConsumerHandler(fmt.Sprintf("orders-%d", i), topic, sub, func(m *message.Message) error {
			o, err := decode(m.Payload)
			if err != nil {
				return err
			}
			t.add(o)
			return nil
		})
	}
	ran := make(chan error, 1)
	go func() { ran <- r.Run(context.Background()) }()
	testenv.Recv(tb, t.done, "every order consumed")
	if err := r.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := testenv.Recv(tb, ran, "the router stopped"); err != nil {
		tb.Fatal(err)
	}
}

func init() {
	register(row{
		name: "RabbitMQ consumer, memstore, trivial handler",
		unit: "msgs/s", n: 20000, cpu: true,
		setup: func(tb testing.TB) []side {
			url := testenv.RabbitMQ.Addr(tb)
			return []side{
				{name: "bare amqp091-go consumer (8 workers, prefetch 64)", run: func(tb testing.TB, n int) sample {
					return amqpRun(tb, url, n, "bare", func(q string, t *tally) { bareAMQP(tb, url, q, t) })
				}},
				{name: "dedupamqp Consumer, memstore", run: func(tb testing.TB, n int) sample {
					return amqpRun(tb, url, n, "dedup", func(q string, t *tally) { dedupAMQP(tb, url, q, t) })
				}},
				{name: "Watermill AMQP subscriber + Deduplicator", run: func(tb testing.TB, n int) sample {
					return amqpRun(tb, url, n, "watermill", func(q string, t *tally) { watermillAMQP(tb, url, q, t) })
				}},
			}
		},
	})
}
