package bench

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedup-go/dedup"
	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/internal/testenv"
	dedupwatermill "github.com/dedup-go/dedup/middleware/watermill"
)

// watermillPayload is the size of every message of the Watermill rows.
const watermillPayload = 256

// paddedOrders returns n distinct orders encoded in watermillPayload bytes
// (JSON padded with spaces, which the decoder skips), and their ids.
func paddedOrders(n int) (bodies [][]byte, keys []string) {
	bodies, keys = ordersJSON(n)
	for i, b := range bodies {
		bodies[i] = append(b, bytes.Repeat([]byte{' '}, watermillPayload-len(b))...)
	}
	return bodies, keys
}

// watermillRun is amqpRun with 256-byte messages: a queue of its own,
// n orders published with confirms and the order's id as Watermill's
// UUID header, consumed by consume, checked once each, the queue empty.
func watermillRun(tb testing.TB, url string, n int, side string, consume func(queue string, t *tally)) sample {
	ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	conn, err := amqp.Dial(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		tb.Fatal(err)
	}
	top := dedupamqp.Topology{Queue: uniqueName("watermill")}
	if err := top.Declare(ctx, ch); err != nil {
		tb.Fatal(err)
	}
	defer func() {
		for _, q := range []string{top.Queue, top.Queue + ".dlq"} {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		_ = ch.ExchangeDelete(top.Queue+".dlx", false, false)
	}()
	if err := ch.Confirm(false); err != nil {
		tb.Fatal(err)
	}
	bodies, keys := paddedOrders(n)
	pending := make([]*amqp.DeferredConfirmation, 0, n)
	for i, body := range bodies {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", top.Queue, true, false, amqp.Publishing{
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

// dedupWatermillAMQP is watermillAMQP's router with dedupwatermill over
// memstore in place of Watermill's Deduplicator.
func dedupWatermillAMQP(tb testing.TB, url, queue string, t *tally) {
	cfg := wamqp.NewDurableQueueConfig(url)
	cfg.TopologyBuilder = noTopology{}
	cfg.Consume.Qos.PrefetchCount = amqpPrefetch / amqpWorkers
	sub, err := wamqp.NewSubscriber(cfg, watermill.NopLogger{})
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = sub.Close() }()
	mw, err := dedupwatermill.New(orderStore(tb, t.n), &dedupwatermill.Options{Config: &dedup.Config{Namespace: "bench"}})
	if err != nil {
		tb.Fatal(err)
	}
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: testenv.WaitTimeout}, watermill.NopLogger{})
	if err != nil {
		tb.Fatal(err)
	}
	r.AddMiddleware(mw.Middleware)
	for i := range amqpWorkers {
		r.AddConsumerHandler(fmt.Sprintf("orders-%d", i), queue, sub, func(m *message.Message) error {
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
	if err := sub.Close(); err != nil {
		tb.Fatal(err)
	}
}

// dedupWatermillDuplicates answers a duplicate through the middleware over
// memstore, outside a router (the handler is what a router would call).
func dedupWatermillDuplicates(tb testing.TB, n int) sample {
	st := orderStore(tb, 10)
	mw, err := dedupwatermill.New(st, &dedupwatermill.Options{Config: &dedup.Config{Namespace: "bench"}})
	if err != nil {
		tb.Fatal(err)
	}
	h := mw.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	msg := message.NewMessage("o-1", []byte(`{"id":"o-1","amount":1999}`))
	if _, err := h(msg); err != nil {
		tb.Fatal(err)
	}
	return timed(n, func(int) { _, _ = h(msg) })
}

func init() {
	register(row{
		name: "Watermill router over watermill-amqp/v3, 256-byte messages, trivial handler",
		unit: "msgs/s", n: 20000,
		setup: func(tb testing.TB) []side {
			url := testenv.RabbitMQ.Addr(tb)
			return []side{
				{name: "router + Watermill Deduplicator (UUID, in memory)", run: func(tb testing.TB, n int) sample {
					return watermillRun(tb, url, n, "watermill", func(q string, t *tally) { watermillAMQP(tb, url, q, t) })
				}},
				{name: "router + dedupwatermill, memstore", run: func(tb testing.TB, n int) sample {
					return watermillRun(tb, url, n, "dedupwatermill", func(q string, t *tally) { dedupWatermillAMQP(tb, url, q, t) })
				}},
			}
		},
	}, row{
		name: "Watermill duplicate answered in process by the handler middleware, memstore, nothing produced",
		unit: "ns/op", n: 200_000, allocs: true,
		setup: func(tb testing.TB) []side {
			return []side{
				watermillDuplicates("UUID"),
				{name: "dedupwatermill Middleware", run: dedupWatermillDuplicates},
			}
		},
	})
}
