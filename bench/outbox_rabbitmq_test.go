package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/pgoutbox"
)

// amqpOutboxRun declares a durable classic queue of its own, runs send
// with its name (the Destination of the default exchange), checks that
// the queue holds every message, and deletes it.
func amqpOutboxRun(tb testing.TB, ch *amqp.Channel, n int, send func(queue string) sample) sample {
	queue := uniqueName("obq")
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		tb.Fatal(err)
	}
	defer func() {
		if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
			tb.Errorf("delete queue %s: %v", queue, err)
		}
	}()
	s := send(queue)
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if q.Messages != n {
		tb.Fatalf("the queue holds %d messages, want %d", q.Messages, n)
	}
	return s
}

// bareAMQPPublish is the publisher a user would write with amqp091-go:
// one channel in confirm mode, every message mandatory and persistent
// with its id as MessageId, at most outboxWindow awaiting their confirm;
// each confirm is checked, and a returned message (counted by returned)
// fails the run.
func bareAMQPPublish(tb testing.TB, ch *amqp.Channel, returned *atomic.Int64, queue string, evs []outboxEvent) {
	before := returned.Load()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	confirms := make([]*amqp.DeferredConfirmation, len(evs))
	await := func(dc *amqp.DeferredConfirmation) {
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			tb.Fatalf("publish not confirmed (acked %v): %v", ok, err)
		}
	}
	for i, e := range evs {
		if i >= outboxWindow {
			await(confirms[i-outboxWindow])
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, MessageId: e.id, Body: e.body,
		})
		if err != nil {
			tb.Fatal(err)
		}
		confirms[i] = dc
	}
	for _, dc := range confirms[max(len(evs)-outboxWindow, 0):] {
		await(dc)
	}
	// RabbitMQ sends a return before the confirm of its message.
	if n := returned.Load() - before; n > 0 {
		tb.Fatalf("%d messages returned", n)
	}
}

func init() {
	register(row{
		name: "outbox relay to RabbitMQ (PostgreSQL outbox, 1 relay)",
		unit: "msgs/s", n: 20000,
		setup: func(tb testing.TB) []side {
			url := testenv.RabbitMQ.Addr(tb)
			conn, err := amqp.Dial(url)
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { _ = conn.Close() })
			admin, err := conn.Channel()
			if err != nil {
				tb.Fatal(err)
			}
			ch, err := conn.Channel()
			if err != nil {
				tb.Fatal(err)
			}
			if err := ch.Confirm(false); err != nil {
				tb.Fatal(err)
			}
			// Returns are counted as they come, so that amqp091 never
			// waits for room for one; the loop ends with the connection.
			var returned atomic.Int64
			returns := ch.NotifyReturn(make(chan amqp.Return, 64))
			go func() {
				for range returns {
					returned.Add(1)
				}
			}()
			pool := openPostgres(tb)
			pub, err := dedupamqp.NewOutboxPublisher(url, nil)
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() {
				if err := pub.Close(context.Background()); err != nil {
					tb.Error(err)
				}
			})
			evs := outboxEvents(20000)
			relay := func(buckets, batch int) side {
				return side{name: fmt.Sprintf("pgoutbox relay, Buckets %d, BatchSize %d", buckets, batch), run: func(tb testing.TB, n int) sample {
					return amqpOutboxRun(tb, admin, n, func(queue string) sample {
						return relayRun(tb, pool, pub, buckets, pgoutbox.RelayOptions{BatchSize: batch}, evs[:n], queue)
					})
				}}
			}
			return []side{
				{name: fmt.Sprintf("bare amqp091-go, mandatory persistent, %d confirms in flight", outboxWindow), run: func(tb testing.TB, n int) sample {
					return amqpOutboxRun(tb, admin, n, func(queue string) sample {
						return rate(n, func() { bareAMQPPublish(tb, ch, &returned, queue, evs[:n]) })
					})
				}},
				relay(64, 256), relay(64, 1024), relay(64, 4096), relay(8, 4096),
			}
		},
	})
}
