package e2e_test

import (
	"context"
	"fmt"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store/pgoutbox/internal/relaytest"
)

// TestEndToEndRabbitMQ is runE2E on RabbitMQ: a dedupamqp consumer of
// the orders' queue (dead letters to an exchange of their own), the
// relays publishing with dedupamqp's OutboxPublisher to a direct exchange
// ("exchange/created", "exchange/confirmed": the id as the AMQP
// MessageId), a downstream dedupamqp consumer keyed on it
// (idstrategy.MessageID) of a queue bound to both keys, and a second
// queue bound alike that keeps every copy, in the order the broker
// routed them, for the order check. RabbitMQ has no duplicate window:
// every copy a relay publishes again reaches the downstream consumer.
func TestEndToEndRabbitMQ(t *testing.T) {
	if testing.Short() {
		t.Skip("a slow fault test (the consumer, the relays and PostgreSQL killed and restarted, end to end on RabbitMQ): skipped under -short")
	}
	t.Parallel()
	runE2E(t, &amqpE2E{}, e2eParams{orders: 2000, duplicates: 400, customers: 100, kills: 8})
}

// amqpNames are the names of a RabbitMQ end-to-end test.
type amqpNames struct {
	prefix                 string
	in, dlx, dlq           string // the orders' queue, its dead letters' exchange (fanout) and queue
	out, downQueue, tapped string // the events' exchange (direct), the downstream's queue, the copy kept
}

func newAMQPNames(prefix string) amqpNames {
	p := "pgoutbox.e2e." + prefix + "."
	return amqpNames{prefix: prefix, in: p + "in", dlx: p + "dlx", dlq: p + "dlq", out: p + "out", downQueue: p + "downstream", tapped: p + "tapped"}
}

// amqpE2E is the e2eBroker of RabbitMQ.
type amqpE2E struct {
	addr string
	n    amqpNames
	conn *amqp.Connection // the test's
	rcv  *dedup.Receiver[*dedup.Message[e2eEvent], struct{}]
	down *dedupamqp.Consumer[e2eEvent, struct{}]
}

func (b *amqpE2E) child() (string, string, string) { return "rabbitmq", b.addr, b.n.prefix }

func (b *amqpE2E) destination(event string) string {
	return dedupamqp.OutboxDestination(b.n.out, event)
}

func (b *amqpE2E) setup(t *testing.T) {
	b.addr = testenv.RabbitMQ.Addr(t)
	b.n = newAMQPNames(suffix())
	var err error
	b.conn, err = amqp.Dial(b.addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.conn.Close() })
	ch := b.channel(t)
	require.NoError(t, ch.ExchangeDeclare(b.n.dlx, amqp.ExchangeFanout, false, false, false, false, nil))
	require.NoError(t, ch.ExchangeDeclare(b.n.out, amqp.ExchangeDirect, false, false, false, false, nil))
	for _, q := range []string{b.n.in, b.n.dlq, b.n.downQueue, b.n.tapped} {
		_, err := ch.QueueDeclare(q, false, false, false, false, nil)
		require.NoError(t, err)
	}
	require.NoError(t, ch.QueueBind(b.n.dlq, "", b.n.dlx, false, nil))
	for _, q := range []string{b.n.downQueue, b.n.tapped} {
		for _, event := range []string{"created", "confirmed"} {
			require.NoError(t, ch.QueueBind(q, event, b.n.out, false, nil))
		}
	}
	t.Cleanup(func() {
		// The test's connection is still open: cleanups run last first.
		ch, err := b.conn.Channel()
		if err != nil {
			t.Logf("delete the test's queues: %v", err)
			return
		}
		defer func() { _ = ch.Close() }()
		for _, q := range []string{b.n.in, b.n.dlq, b.n.downQueue, b.n.tapped} {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		_ = ch.ExchangeDelete(b.n.dlx, false, false)
		_ = ch.ExchangeDelete(b.n.out, false, false)
	})
}

// channel opens a channel of the test's connection, closed when t ends.
func (b *amqpE2E) channel(t *testing.T) *amqp.Channel {
	ch, err := b.conn.Channel()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ch.Close() })
	return ch
}

func (b *amqpE2E) publish(t *testing.T, orders [][]byte) {
	ch := b.channel(t)
	require.NoError(t, ch.Confirm(false))
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	dcs := make([]*amqp.DeferredConfirmation, len(orders))
	for i, o := range orders {
		var err error
		dcs[i], err = ch.PublishWithDeferredConfirmWithContext(ctx, "", b.n.in, true, false, amqp.Publishing{Body: o, ContentType: "application/json"})
		require.NoError(t, err)
	}
	for _, dc := range dcs {
		ok, err := dc.WaitContext(ctx)
		require.NoError(t, err, "the orders were not all confirmed")
		require.True(t, ok, "an order was nacked")
	}
}

func (b *amqpE2E) downstreamKey() dedup.KeyFunc[*dedup.Message[e2eEvent]] {
	return idstrategy.MessageID[e2eEvent]()
}

func (b *amqpE2E) startDownstream(t *testing.T, rcv *dedup.Receiver[*dedup.Message[e2eEvent], struct{}]) {
	b.rcv = rcv
	b.startDown(t)
	t.Cleanup(func() { b.stopDown(t) })
}

func (b *amqpE2E) startDown(t *testing.T) {
	var err error
	b.down, err = dedupamqp.NewConsumer(b.addr, b.n.downQueue, b.rcv, &dedupamqp.Options{DropPoison: true, Logger: relaytest.Quiet})
	require.NoError(t, err)
	require.NoError(t, b.down.Start(context.WithoutCancel(t.Context())))
}

func (b *amqpE2E) stopDown(t *testing.T) {
	if b.down == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	require.NoError(t, b.down.Stop(ctx), "stop the downstream consumer")
	b.down = nil
}

// inspect returns the queue's ready messages and consumers.
func (b *amqpE2E) inspect(t *testing.T, queue string) amqp.Queue {
	ch, err := b.conn.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	require.NoError(t, err)
	return q
}

// pending: AMQP tells the messages ready, not those delivered and not yet
// acknowledged; idle looks for those.
func (b *amqpE2E) pending(t *testing.T) (bool, string) {
	in, down := b.inspect(t, b.n.in), b.inspect(t, b.n.downQueue)
	return in.Messages == 0 && down.Messages == 0, fmt.Sprintf("%d incoming ready, %d downstream ready", in.Messages, down.Messages)
}

// idle: with the consumer process killed (which returns what it had not
// acknowledged to the queue) and the downstream consumer stopped (which
// settles what it handles and returns the rest), nothing is left in the
// queues. Otherwise the downstream consumer starts again.
func (b *amqpE2E) idle(t *testing.T) bool {
	relaytest.WaitFor(t, testenv.WaitTimeout, "the killed consumer's channel to close", func() bool { return b.inspect(t, b.n.in).Consumers == 0 })
	b.stopDown(t)
	if b.inspect(t, b.n.in).Messages == 0 && b.inspect(t, b.n.downQueue).Messages == 0 {
		return true
	}
	b.startDown(t)
	return false
}

func (b *amqpE2E) deadLetters(t *testing.T) int { return b.inspect(t, b.n.dlq).Messages }

func (b *amqpE2E) output(t *testing.T) []stored {
	ch := b.channel(t)
	var out []stored
	for {
		d, ok, err := ch.Get(b.n.tapped, true)
		require.NoError(t, err)
		if !ok {
			return out
		}
		out = append(out, stored{seq: uint64(len(out) + 1), id: d.MessageId, subj: d.RoutingKey, body: string(d.Body)})
	}
}

// The side of the processes.

func (b *amqpE2E) consume(ctx context.Context, rcv *dedup.Receiver[*dedup.Message[e2eOrder], string]) error {
	c, err := dedupamqp.NewConsumer(b.addr, b.n.in, rcv, &dedupamqp.Options{DeadLetterExchange: b.n.dlx, Concurrency: 8, Logger: relaytest.Quiet})
	if err != nil {
		return err
	}
	return c.Start(ctx)
}

func (b *amqpE2E) publisher(context.Context) (outbox.Publisher, error) {
	return dedupamqp.NewOutboxPublisher(b.addr, nil)
}
