package redrive_test

import (
	"context"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/internal/testenv"
)

// rabbitEnv is one test's RabbitMQ: a queue of orders with its
// dead-letter exchange and queue (the adapter's Topology, the queue's own
// x-dead-letter-exchange included), deleted at cleanup, and a store.
type rabbitEnv struct {
	url  string
	conn *amqp.Connection
	top  dedupamqp.Topology
	st   testStore
	ns   string
}

func newRabbitEnv(t testing.TB) *rabbitEnv {
	t.Helper()
	url := testenv.RabbitMQ.Addr(t)
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	q := "redrive." + strings.ToLower(suffix()) + ".orders"
	e := &rabbitEnv{url: url, conn: conn, st: newStore(t), ns: "orders",
		top: dedupamqp.Topology{Queue: q, DeadLetterExchange: q + ".dlx", DeadLetterQueue: q + ".dlq"}}
	ch := e.channel(t)
	require.NoError(t, e.top.Declare(t.Context(), ch))
	t.Cleanup(func() {
		conn, err := amqp.Dial(url)
		if err != nil {
			t.Logf("clean up %s: %v", q, err)
			return
		}
		defer conn.Close()
		for _, name := range []string{e.top.Queue, e.top.DeadLetterQueue} {
			ch, err := conn.Channel()
			if err != nil {
				t.Logf("clean up %s: %v", name, err)
				return
			}
			_, _ = ch.QueueDelete(name, false, false, false) // a test may have deleted it
			_ = ch.Close()
		}
		ch, err := conn.Channel()
		if err == nil {
			if err := ch.ExchangeDelete(e.top.DeadLetterExchange, false, false); err != nil {
				t.Logf("delete exchange %s: %v", e.top.DeadLetterExchange, err)
			}
		}
	})
	return e
}

// channel opens a channel closed at the end of the test.
func (e *rabbitEnv) channel(t testing.TB) *amqp.Channel {
	t.Helper()
	ch, err := e.conn.Channel()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ch.Close() })
	return ch
}

// args are the tool's arguments to redrive the test's dead letters.
func (e *rabbitEnv) args(extra ...string) []string {
	args := append([]string{"redrive", "rabbitmq", "--amqp", e.url, "--queue", e.top.DeadLetterQueue}, e.st.flags...)
	return append(args, extra...)
}

// publish publishes msgs to queue through the default exchange, with
// confirms, and waits for them.
func (e *rabbitEnv) publish(t testing.TB, queue string, msgs []amqp.Publishing) {
	t.Helper()
	ch := e.channel(t)
	require.NoError(t, ch.Confirm(false))
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	var pending []*amqp.DeferredConfirmation
	for _, m := range msgs {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, m)
		require.NoError(t, err)
		pending = append(pending, dc)
	}
	for _, dc := range pending {
		ok, err := dc.WaitContext(ctx)
		require.NoError(t, err)
		require.True(t, ok, "publish nacked")
	}
}

// publishOrders publishes orders to the orders queue, each with its id as
// its message id.
func (e *rabbitEnv) publishOrders(t testing.TB, os []Order) {
	t.Helper()
	msgs := make([]amqp.Publishing, len(os))
	for i, o := range os {
		msgs[i] = amqp.Publishing{Body: orderJSON(t, o), ContentType: "application/json", MessageId: "m-" + o.ID,
			DeliveryMode: amqp.Persistent, Headers: amqp.Table{"Tenant": "acme"}}
	}
	e.publish(t, e.top.Queue, msgs)
}

// depth is the number of ready messages of a queue.
func (e *rabbitEnv) depth(t testing.TB, queue string) int {
	t.Helper()
	ch, err := e.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(t, err)
	return q.Messages
}

// consume runs rcv over the orders queue with the adapter until the
// returned stop is called (or the test ends). reject dead-letters with
// the broker's own dead-lettering (DropPoison, to the queue's
// x-dead-letter-exchange) instead of the adapter's publish.
func (e *rabbitEnv) consume(t testing.TB, rcv *dedup.Receiver[*dedup.Message[Order], string], reject, fingerprint bool) (stop func()) {
	t.Helper()
	opts := e.top.Options()
	if reject {
		opts.DeadLetterExchange = ""
		opts.DropPoison = true
	}
	opts.Concurrency, opts.Prefetch, opts.Fingerprint = 16, 64, fingerprint
	c, err := dedupamqp.NewConsumer(e.url, e.top.Queue, rcv, opts)
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
		defer cancel()
		require.NoError(t, c.Stop(ctx))
		testenv.Recv(t, c.Stopped(), "the consumer to stop")
	}
	t.Cleanup(stop)
	return stop
}

// consumer returns a function that starts a consumer of rcv (see
// consume).
func (e *rabbitEnv) consumer(t testing.TB, rcv *dedup.Receiver[*dedup.Message[Order], string], reject, fingerprint bool) func() (stop func()) {
	return func() func() { return e.consume(t, rcv, reject, fingerprint) }
}

// drained waits until the orders queue has no ready message, then stops
// the consumer (which settles what it runs). Stop requeues the deliveries
// prefetched and not started, which the ready count did not show: while
// some are back, restart (a consumer of the same receiver) handles them.
func (e *rabbitEnv) drained(t testing.TB, stop func(), restart func() (stop func())) {
	t.Helper()
	for range 20 {
		eventually(t, testenv.WaitTimeout, "the orders queue to drain", func() bool { return e.depth(t, e.top.Queue) == 0 })
		stop()
		if e.depth(t, e.top.Queue) == 0 {
			return
		}
		stop = restart()
	}
	t.Fatal("the orders queue never stayed drained")
}

// waitDLQ waits until the dead-letter queue holds n letters.
func (e *rabbitEnv) waitDLQ(t testing.TB, n int) {
	t.Helper()
	eventually(t, testenv.WaitTimeout, "the dead letters", func() bool { return e.depth(t, e.top.DeadLetterQueue) >= n })
	require.Equal(t, n, e.depth(t, e.top.DeadLetterQueue))
}

// deadLetter publishes the orders and has a broken handler fail each one,
// so that the adapter dead-letters them all (attempts-exhausted, with a
// failed record each); with reject, by the broker's own dead-lettering.
func (e *rabbitEnv) deadLetter(t testing.TB, os []Order, reject bool) {
	t.Helper()
	before := e.depth(t, e.top.DeadLetterQueue)
	e.publishOrders(t, os)
	restart := e.consumer(t, brokenReceiver(t, e.st, e.ns), reject, false)
	stop := restart()
	e.waitDLQ(t, before+len(os))
	e.drained(t, stop, restart)
}

// getAll reads (and acknowledges) every ready message of queue.
func (e *rabbitEnv) getAll(t testing.TB, queue string) []amqp.Delivery {
	t.Helper()
	ch := e.channel(t)
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(queue, true)
		require.NoError(t, err)
		if !ok {
			return out
		}
		out = append(out, d)
	}
}
