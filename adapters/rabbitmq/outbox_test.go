package dedupamqp_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/outbox/outboxtest"
	"github.com/dedup-go/dedup/store/memstore"
)

// TestOutboxPublisher runs the outbox publishers' suite on RabbitMQ, a
// queue of its own per test, reached through a topic exchange
// ("exchange/routing-key") and through the default exchange (the queue's
// name), and read back with basic.get.
func TestOutboxPublisher(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	conn := dial(t, url)
	p := newOutboxPublisher(t, url, nil)
	t.Run("exchange", func(t *testing.T) {
		t.Parallel()
		outboxtest.Run(t, func(t *testing.T) outboxtest.Target {
			q := outboxQueue(t, conn, nil)
			ex := outboxExchange(t, conn, amqp.ExchangeTopic)
			require.NoError(t, channel(t, conn).QueueBind(q, "orders.#", ex, false, nil))
			return outboxtest.Target{
				Publisher:   p,
				Destination: dedupamqp.OutboxDestination(ex, "orders.created"),
				Unroutable:  dedupamqp.OutboxDestination(ex, "refunds.created"),
				Invalid:     dedupamqp.OutboxDestination(ex, strings.Repeat("k", 256)),
				Read:        func(ctx context.Context, n int) ([]outboxtest.Received, error) { return readQueue(ctx, conn, q, n) },
			}
		})
	})
	t.Run("default exchange", func(t *testing.T) {
		t.Parallel()
		outboxtest.Run(t, func(t *testing.T) outboxtest.Target {
			q := outboxQueue(t, conn, nil)
			return outboxtest.Target{
				Publisher:   p,
				Destination: q,
				Unroutable:  q + ".nobody",
				Invalid:     "/",
				Read:        func(ctx context.Context, n int) ([]outboxtest.Received, error) { return readQueue(ctx, conn, q, n) },
			}
		})
	})
}

// TestOutboxDestination: how a Destination maps to an exchange and a
// routing key, both ways.
func TestOutboxDestination(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ dest, exchange, key string }{
		{"billing", "", "billing"},
		{"orders/order.created", "orders", "order.created"},
		{"orders/eu/created", "orders", "eu/created"},
		{"/billing/eu", "", "billing/eu"},
		{"fanout/", "fanout", ""},
	} {
		ex, key := dedupamqp.SplitOutboxDestination(c.dest)
		require.Equal(t, [2]string{c.exchange, c.key}, [2]string{ex, key}, "split %q", c.dest)
		require.Equal(t, c.dest, dedupamqp.OutboxDestination(ex, key), "join %q %q", ex, key)
	}
}

// TestOutboxPublisherMessage: what a message carries (its id as the
// MessageId, persistent, its headers and nothing more), and the messages
// AMQP cannot carry fail alone, before anything is published.
func TestOutboxPublisherMessage(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	conn := dial(t, url)
	q := outboxQueue(t, conn, nil)
	p := newOutboxPublisher(t, url, &dedupamqp.OutboxOptions{MaxBodySize: 64})
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()

	good := outbox.Message{ID: outbox.MessageID("billing:o-1", "1"), Destination: q, OrderingKey: "o-1",
		Body: []byte(`{"id":"o-1"}`), Header: map[string]string{"Event-Type": "payment.captured", "x-tenant": "acme"}}
	long := strings.Repeat("k", 256)
	msgs := []outbox.Message{
		good,
		{ID: "no-destination", Body: []byte("x")},
		{ID: "long-key", Destination: long, Body: []byte("x")},
		{ID: "long-exchange", Destination: long + "/k", Body: []byte("x")},
		{ID: "not-utf8", Destination: "q\xff", Body: []byte("x")},
		{ID: "", Destination: q, Body: []byte("x")},
		{ID: long, Destination: q, Body: []byte("x")},
		{ID: "big", Destination: q, Body: bytes.Repeat([]byte("x"), 65)},
		{ID: "long-header", Destination: q, Body: []byte("x"), Header: map[string]string{long: "v"}},
	}
	err := p.Publish(ctx, msgs)
	var be *outbox.BatchError
	require.ErrorAs(t, err, &be)
	require.NoError(t, be.Errs[0])
	for i, e := range be.Errs[1:] {
		require.ErrorIs(t, e, dedupamqp.ErrInvalidMessage, "message %d (%s)", i+1, msgs[i+1].ID)
		require.ErrorIs(t, e, outbox.ErrPermanent, "message %d (%s): refused for good", i+1, msgs[i+1].ID)
	}
	require.ErrorIs(t, be.Errs[5], dedup.ErrInvalidKey, "no id")

	got := getAll(t, conn, q, 1)[0]
	require.Equal(t, good.ID, got.MessageId)
	require.Equal(t, amqp.Persistent, got.DeliveryMode)
	require.Equal(t, good.Body, got.Body)
	require.Equal(t, amqp.Table{"Event-Type": "payment.captured", "x-tenant": "acme"}, got.Headers,
		"the message's headers, as strings, and none of the publisher's own")
	require.Zero(t, depth(t, conn, q), "only the valid message was published")

	require.ErrorIs(t, p.Publish(ctx, msgs[1:2]), dedupamqp.ErrInvalidMessage, "alone, too")
}

// TestOutboxPublisherExchanges: a message to an exchange that does not
// exist fails alone with ErrNoExchange (a publish to it would close the
// channel, and the messages after it with it), also when the exchange is
// deleted after the publisher found it: once that batch failed, the next
// one finds it missing again.
func TestOutboxPublisherExchanges(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	conn := dial(t, url)
	q := outboxQueue(t, conn, nil)
	ex := outboxExchange(t, conn, amqp.ExchangeFanout)
	require.NoError(t, channel(t, conn).QueueBind(q, "", ex, false, nil))
	p := newOutboxPublisher(t, url, nil)
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	msg := func(id, dest string) outbox.Message {
		return outbox.Message{ID: id, Destination: dest, Body: []byte(id)}
	}

	err := p.Publish(ctx, []outbox.Message{msg("a", ex+"/"), msg("b", "dedupt.no-such-exchange."+suffix()+"/k"), msg("c", q)})
	require.Equal(t, []bool{true, false, true}, outbox.Acknowledged(err, 3), "%v", err)
	var be *outbox.BatchError
	require.ErrorAs(t, err, &be)
	require.ErrorIs(t, be.Errs[1], dedupamqp.ErrNoExchange)
	require.NotErrorIs(t, be.Errs[1], outbox.ErrPermanent, "an exchange can be declared later")
	require.Equal(t, []string{"a", "c"}, ids(getAll(t, conn, q, 2)))

	// ex is known now; delete it, and publish to it first in a batch.
	require.NoError(t, channel(t, conn).ExchangeDelete(ex, false, false))
	batch := []outbox.Message{msg("d", ex+"/"), msg("e", q), msg("f", q)}
	err = p.Publish(ctx, batch)
	require.Error(t, err)
	require.False(t, outbox.Acknowledged(err, 3)[0])
	err = p.Publish(ctx, batch)
	require.Equal(t, []bool{false, true, true}, outbox.Acknowledged(err, 3), "%v", err)
	require.ErrorIs(t, err, dedupamqp.ErrNoExchange)
}

// TestOutboxPublisherNacked: a message the broker refuses (a queue at its
// x-max-length, overflow reject-publish) fails alone with ErrNacked.
func TestOutboxPublisherNacked(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	conn := dial(t, url)
	q := outboxQueue(t, conn, amqp.Table{"x-max-length": int32(2), "x-overflow": "reject-publish"})
	p := newOutboxPublisher(t, url, nil)
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	var msgs []outbox.Message
	for i := range 4 {
		msgs = append(msgs, outbox.Message{ID: fmt.Sprint(i), Destination: q, Body: []byte("x")})
	}
	err := p.Publish(ctx, msgs)
	require.Equal(t, []bool{true, true, false, false}, outbox.Acknowledged(err, 4), "%v", err)
	require.ErrorIs(t, err, dedupamqp.ErrNacked)
	require.NotErrorIs(t, err, dedupamqp.ErrReturned)
	require.NotErrorIs(t, err, outbox.ErrPermanent, "a full queue drains")
}

// TestOutboxPublisherConcurrent: calls at once, each with unroutable
// messages among its own: each call is told of its own, and only of them
// (returns are told apart by the channel each call publishes on).
func TestOutboxPublisherConcurrent(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	conn := dial(t, url)
	q := outboxQueue(t, conn, nil)
	p := newOutboxPublisher(t, url, nil)
	const calls, rounds, size = 6, 5, 40
	var wg sync.WaitGroup
	var stored atomic.Int64
	errs := make(chan error, calls)
	for c := range calls {
		wg.Go(func() {
			for r := range rounds {
				var msgs []outbox.Message
				want := make([]bool, size)
				for i := range size {
					m := outbox.Message{ID: fmt.Sprintf("c%d-r%d-%d", c, r, i), Destination: q, Body: []byte("x")}
					if (i+c+r)%7 == 0 {
						m.Destination = q + ".nobody"
					} else {
						want[i] = true
						stored.Add(1)
					}
					msgs = append(msgs, m)
				}
				ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
				err := p.Publish(ctx, msgs)
				cancel()
				if got := outbox.Acknowledged(err, size); !slices.Equal(got, want) {
					errs <- fmt.Errorf("call %d round %d: acknowledged %v, want %v: %v", c, r, got, want, err)
					return
				}
			}
		})
	}
	testenv.Wait(t, &wg, "the calls")
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	eventually(t, "every routable message stored", func() bool { return depth(t, conn, q) == int(stored.Load()) })
}

// TestOutboxPublisherConnectionCut: the connection dies while a batch
// awaits its confirms (a network cut): the call returns errors for the
// messages not confirmed, matching amqp.ErrClosed, and the next call
// reconnects and publishes them again.
func TestOutboxPublisherConnectionCut(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	conn := dial(t, url)
	q := outboxQueue(t, conn, nil)
	v := startValve(t, url)
	p := newOutboxPublisher(t, "", &dedupamqp.OutboxOptions{Dial: v.dialer(t, url)})
	msgs := outboxMessages(q, "cut", 50)
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	require.NoError(t, p.Publish(ctx, msgs[:1]), "connected")

	v.down.hold() // the confirms stay in the valve
	done := make(chan error, 1)
	go func() { done <- p.Publish(ctx, msgs) }()
	eventually(t, "the batch stored, its confirms held", func() bool { return depth(t, conn, q) == len(msgs)+1 })
	v.cut()
	err := testenv.Recv(t, done, "Publish to return after the cut")
	require.Equal(t, make([]bool, len(msgs)), outbox.Acknowledged(err, len(msgs)), "%v", err)
	require.ErrorIs(t, err, amqp.ErrClosed)
	require.NotErrorIs(t, err, context.DeadlineExceeded)

	v.down.release()
	require.NoError(t, p.Publish(ctx, msgs), "the next call reconnects")
	require.Equal(t, int64(2), v.dials.Load())
	require.Equal(t, 2*len(msgs)+1, depth(t, conn, q), "every copy with its id, for the next consumer to drop")
}

// TestOutboxPublisherForcedClose: the broker closes the publisher's
// connection (rabbitmqctl close_connection) while it publishes batch
// after batch: the call it hits returns errors (not a hang) for what was
// not confirmed, every message reported acknowledged is in the queue, and
// the next calls reconnect.
func TestOutboxPublisherForcedClose(t *testing.T) {
	t.Parallel()
	forcedClose(t, "", func(ctx context.Context, p *dedupamqp.OutboxPublisher, msgs []outbox.Message) ([]bool, error) {
		err := p.Publish(ctx, msgs)
		return outbox.Acknowledged(err, len(msgs)), err
	})
}

// forcedClose runs the forced-close test with publish, which publishes
// one call's messages and says which were acknowledged: calls of 200
// messages back to back while rabbitmqctl closes the publisher's
// connection, until a close falls on a call in flight and two calls have
// gone through after it; every failed call's error matches amqp.ErrClosed
// (not a hang ended by the context), and every message acknowledged is in
// the queue.
func forcedClose(t *testing.T, name string, publish func(context.Context, *dedupamqp.OutboxPublisher, []outbox.Message) ([]bool, error)) {
	url := testenv.RabbitMQ.Addr(t)
	ctl := testenv.Binary(t, "rabbitmqctl", testenv.RabbitMQ.Start)
	conn := dial(t, url)
	q := outboxQueue(t, conn, nil)
	connName := "dedupt-outbox-" + name + suffix()
	var dials atomic.Int64
	p := newOutboxPublisher(t, "", &dedupamqp.OutboxOptions{Dial: func(ctx context.Context) (*amqp.Connection, error) {
		dials.Add(1)
		return amqp.DialConfig(url, amqp.Config{Properties: amqp.Table{"connection_name": connName}, Heartbeat: 10 * time.Second})
	}})

	var (
		mu       sync.Mutex
		acked    []string
		failures []error
		after    int // calls acknowledged whole after the first failure
	)
	stop := make(chan struct{})
	var once sync.Once
	halt := func() { once.Do(func() { close(stop) }) }
	var wg sync.WaitGroup
	wg.Go(func() {
		for b := 0; ; b++ {
			select {
			case <-stop:
				return
			default:
			}
			msgs := outboxMessages(q, fmt.Sprintf("%sb%d", name, b), 200)
			ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
			ok, err := publish(ctx, p, msgs)
			cancel()
			mu.Lock()
			for i, ok := range ok {
				if ok {
					acked = append(acked, msgs[i].ID)
				}
			}
			switch {
			case err != nil:
				failures = append(failures, err)
			case len(failures) > 0:
				after++
			}
			mu.Unlock()
		}
	})
	t.Cleanup(func() { halt(); wg.Wait() })

	eventually(t, "the publisher connected", func() bool { return dials.Load() == 1 && depth(t, conn, q) > 0 })
	for attempt := 1; ; attempt++ {
		closeConnection(t, ctl, connName)
		hit := false
		eventually(t, "the publisher to reconnect", func() bool {
			mu.Lock()
			defer mu.Unlock()
			hit = len(failures) > 0
			return dials.Load() > int64(attempt)
		})
		if hit {
			break
		}
		// The close fell between two calls: the next one reconnected
		// without an error. Close the new connection.
		require.Less(t, attempt, 5, "no close fell on a call in flight")
	}
	eventually(t, "two calls after the failure", func() bool { mu.Lock(); defer mu.Unlock(); return after >= 2 })
	halt()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	for _, err := range failures {
		require.ErrorIs(t, err, amqp.ErrClosed)
		require.NotErrorIs(t, err, context.DeadlineExceeded, "a hang, ended by the context")
	}
	stored := map[string]bool{}
	for _, d := range getAll(t, conn, q, depth(t, conn, q)) {
		stored[d.MessageId] = true
	}
	for _, id := range acked {
		require.True(t, stored[id], "message %s acknowledged, not stored", id)
	}
	t.Logf("%d messages acknowledged, %d stored, %d failed calls, %d dials", len(acked), len(stored), len(failures), dials.Load())
}

// TestOutboxPublisherStalled: a broker that stops answering (the valve
// holds what it sends) or reading (the valve holds what the publisher
// writes: a socket write blocks, as under a resource alarm) holds a call
// no longer than its context, and the next call publishes once the
// broker is back: on the same connection when the call only awaited
// confirms, on a new one when it was stuck in a write.
func TestOutboxPublisherStalled(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	conn := dial(t, url)
	q := outboxQueue(t, conn, nil)
	v := startValve(t, url)
	p := newOutboxPublisher(t, "", &dedupamqp.OutboxOptions{Dial: v.dialer(t, url)})
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	require.NoError(t, p.Publish(ctx, outboxMessages(q, "first", 1)))

	stalled := func(msgs []outbox.Message) error {
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- p.Publish(short, msgs) }()
		return testenv.Recv(t, done, "Publish to return at its context's end")
	}

	v.down.hold()
	confirms := outboxMessages(q, "confirms", 10)
	err := stalled(confirms)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, make([]bool, len(confirms)), outbox.Acknowledged(err, len(confirms)))
	v.down.release()
	require.NoError(t, p.Publish(ctx, confirms))
	require.Equal(t, int64(1), v.dials.Load(), "the connection was kept")

	v.up.hold()
	// More than the sockets' buffers hold (a few MB each): the writes block.
	writes := outboxMessages(q, "writes", 48)
	for i := range writes {
		writes[i].Body = bytes.Repeat([]byte("w"), 1<<20)
	}
	err = stalled(writes)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, make([]bool, len(writes)), outbox.Acknowledged(err, len(writes)))
	v.up.release()
	require.NoError(t, p.Publish(ctx, writes[:2]))
	require.Equal(t, int64(2), v.dials.Load(), "the blocked connection was closed, and a new one dialed")
}

// TestOutboxPublisherDedupedDownstream: the same outbox message published
// twice (a relay that publishes it again after a crash) reaches the next
// Consumer twice, keyed on the MessageId with idstrategy.MessageID: its
// handler runs once.
func TestOutboxPublisherDedupedDownstream(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	top := declare(t, url, dedupamqp.Topology{})
	p := newOutboxPublisher(t, url, nil)
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	captured := outbox.Message{ID: outbox.MessageID("billing:o-1", "payment-captured"), Destination: top.Queue,
		Body: []byte(`{"id":"o-1","cents":100}`)}
	other := outbox.Message{ID: outbox.MessageID("billing:o-2", "payment-captured"), Destination: top.Queue,
		Body: []byte(`{"id":"o-2","cents":200}`)}
	require.NoError(t, p.Publish(ctx, []outbox.Message{captured, other}))
	require.NoError(t, p.Publish(ctx, []outbox.Message{captured}))

	var handled deduptest.Effects
	st, err := memstore.New(nil)
	require.NoError(t, err)
	var ev events
	cfg := fastConfig("shipping")
	cfg.Observer = &ev
	rcv, err := dedup.NewReceiver(st, idstrategy.MessageID[Order](), func(_ context.Context, m *dedup.Message[Order]) (struct{}, error) {
		handled.Record(m.ID)
		return struct{}{}, nil
	}, cfg)
	require.NoError(t, err)
	c, err := dedupamqp.NewConsumer(url, top.Queue, rcv, top.Options())
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)
	eventually(t, "three deliveries settled", func() bool { return ev.count() == 3 })
	handled.ExactlyOnce(captured.ID, other.ID).Check(t)
	require.Equal(t, map[delivery.Reason]int{"processed": 2, "duplicate": 1}, ev.reasons())
}

// TestOutboxPublisherLifecycle: the configuration refused, and Close.
func TestOutboxPublisherLifecycle(t *testing.T) {
	t.Parallel()
	_, err := dedupamqp.NewOutboxPublisher("", nil)
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)
	_, err = dedupamqp.NewOutboxPublisher("amqp://x", &dedupamqp.OutboxOptions{MaxBodySize: -1})
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)
	_, err = dedupamqp.NewOutboxPublisher("amqp://x", &dedupamqp.OutboxOptions{MaxChannels: -1})
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)
	require.ErrorContains(t, err, "MaxChannels")

	url := testenv.RabbitMQ.Addr(t)
	conn := dial(t, url)
	q := outboxQueue(t, conn, nil)
	p, err := dedupamqp.NewOutboxPublisher(url, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	require.NoError(t, p.Close(ctx), "never connected")
	require.ErrorIs(t, p.Publish(ctx, outboxMessages(q, "closed", 1)), dedupamqp.ErrPublisherClosed)

	// Nothing listens there: an error, no message acknowledged.
	p = newOutboxPublisher(t, fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", testenv.FreePort(t)), nil)
	err = p.Publish(ctx, outboxMessages(q, "unreachable", 2))
	require.Error(t, err)
	require.Equal(t, []bool{false, false}, outbox.Acknowledged(err, 2))
	// A server that accepts and never answers: the dial ends with the
	// call's context, and the call says so.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = silent.Close() })
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	p = newOutboxPublisher(t, "amqp://guest:guest@"+silent.Addr().String()+"/", nil)
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	err = p.Publish(short, outboxMessages(q, "silent", 2))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, []bool{false, false}, outbox.Acknowledged(err, 2))

	p, err = dedupamqp.NewOutboxPublisher(url, nil)
	require.NoError(t, err)
	require.NoError(t, p.Publish(ctx, outboxMessages(q, "open", 3)))
	require.NoError(t, p.Close(ctx))
	require.NoError(t, p.Close(ctx), "twice")
	require.ErrorIs(t, p.Publish(ctx, outboxMessages(q, "closed", 1)), dedupamqp.ErrPublisherClosed)
}

// newOutboxPublisher returns a publisher closed at the end of the test.
func newOutboxPublisher(t *testing.T, url string, opts *dedupamqp.OutboxOptions) *dedupamqp.OutboxPublisher {
	t.Helper()
	p, err := dedupamqp.NewOutboxPublisher(url, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
		defer cancel()
		require.NoError(t, p.Close(ctx))
	})
	return p
}

// outboxMessages returns n messages to dest, named after prefix.
func outboxMessages(dest, prefix string, n int) []outbox.Message {
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{ID: outbox.MessageID("outbox-test:"+prefix, strconv.Itoa(i)), Destination: dest,
			Body: fmt.Appendf(nil, `{"id":"%s-%d"}`, prefix, i)}
	}
	return msgs
}

// outboxQueue declares a durable classic queue with args, deleted at the
// end of the test.
func outboxQueue(t *testing.T, conn *amqp.Connection, args amqp.Table) string {
	t.Helper()
	name := "dedupt." + suffix() + ".outbox"
	_, err := channel(t, conn).QueueDeclare(name, true, false, false, false, args)
	require.NoError(t, err)
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(name, false, false, false)
			_ = ch.Close()
		}
	})
	return name
}

// outboxExchange declares a durable exchange of kind, deleted at the end
// of the test.
func outboxExchange(t *testing.T, conn *amqp.Connection, kind string) string {
	t.Helper()
	name := "dedupt." + suffix() + ".events"
	require.NoError(t, channel(t, conn).ExchangeDeclare(name, kind, true, false, false, false, nil))
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_ = ch.ExchangeDelete(name, false, false)
			_ = ch.Close()
		}
	})
	return name
}

// readQueue waits for queue to hold at least n messages, then takes all
// it holds.
func readQueue(ctx context.Context, conn *amqp.Connection, queue string, n int) ([]outboxtest.Received, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	for {
		st, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			return nil, err
		}
		if st.Messages >= n {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s holds %d of %d messages: %w", queue, st.Messages, n, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	var out []outboxtest.Received
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil || !ok {
			return out, err
		}
		r := outboxtest.Received{ID: d.MessageId, Body: d.Body, Header: map[string]string{}}
		for k, v := range d.Headers {
			r.Header[k] = fmt.Sprint(v)
		}
		out = append(out, r)
	}
}

func ids(ds []amqp.Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.MessageId)
	}
	return out
}

// closeConnection has the broker close the connection named name.
func closeConnection(t *testing.T, ctl, name string) {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), ctl, "-q", "list_connections", "--no-table-headers", "pid", "client_properties").CombinedOutput()
	if err != nil {
		if testenv.Required() {
			t.Fatalf("rabbitmqctl list_connections: %v: %s", err, out)
		}
		t.Skipf("rabbitmqctl cannot reach the broker: %v: %s", err, out)
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		if strings.Contains(line, `"`+name+`"`) {
			pid, _, _ := strings.Cut(line, "\t")
			out, err := exec.CommandContext(t.Context(), ctl, "close_connection", strings.TrimSpace(pid), "outbox test").CombinedOutput()
			require.NoError(t, err, "rabbitmqctl close_connection: %s", out)
			return
		}
	}
	t.Fatalf("no connection named %s among:\n%s", name, out)
}

// valve forwards connections to the broker, and can hold either direction
// (nothing forwarded until released: a broker that stops answering, or
// stops reading) and cut every connection.
type valve struct {
	ln       net.Listener
	target   string
	up, down gate // publisher to broker, broker to publisher
	dials    atomic.Int64

	mu    sync.Mutex
	links []*link
	wg    sync.WaitGroup
}

type link struct {
	conns [2]net.Conn
	cut   chan struct{}
}

func startValve(t *testing.T, url string) *valve {
	t.Helper()
	u, err := amqp.ParseURI(url)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	v := &valve{ln: ln, target: net.JoinHostPort(u.Host, strconv.Itoa(u.Port))}
	v.wg.Go(v.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		v.up.release()
		v.down.release()
		v.cut()
		v.wg.Wait()
	})
	return v
}

// dialer dials the broker of url through the valve, counting the dials.
func (v *valve) dialer(t *testing.T, url string) dedupamqp.Dialer {
	through := v.url(t, url)
	return func(ctx context.Context) (*amqp.Connection, error) {
		v.dials.Add(1)
		return dedupamqp.DialURL(through)(ctx)
	}
}

// url returns url with the valve in place of the broker.
func (v *valve) url(t *testing.T, url string) string {
	u, err := amqp.ParseURI(url)
	require.NoError(t, err)
	host, port, _ := net.SplitHostPort(v.ln.Addr().String())
	u.Host = host
	u.Port, _ = strconv.Atoi(port)
	return u.String()
}

func (v *valve) accept() {
	for {
		c, err := v.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", v.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		l := &link{conns: [2]net.Conn{c, up}, cut: make(chan struct{})}
		v.mu.Lock()
		v.links = append(v.links, l)
		v.mu.Unlock()
		v.wg.Go(func() { forward(up, c, &v.up, l.cut) })
		v.wg.Go(func() { forward(c, up, &v.down, l.cut) })
	}
}

// cut closes every connection forwarded so far; later ones go through.
func (v *valve) cut() {
	v.mu.Lock()
	links := v.links
	v.links = nil
	v.mu.Unlock()
	for _, l := range links {
		close(l.cut)
		_ = l.conns[0].Close()
		_ = l.conns[1].Close()
	}
}

// forward copies src to dst while g lets it, until either closes or cut.
func forward(dst, src net.Conn, g *gate, cut <-chan struct{}) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !g.pass(cut) {
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// gate is open or held.
type gate struct {
	mu   sync.Mutex
	open chan struct{} // closed while the gate is open; nil means open
}

func (g *gate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open == nil || isClosed(g.open) {
		g.open = make(chan struct{})
	}
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open != nil && !isClosed(g.open) {
		close(g.open)
	}
}

// pass waits for the gate to be open, or cut (false).
func (g *gate) pass(cut <-chan struct{}) bool {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	if open == nil {
		return true
	}
	select {
	case <-open:
		return true
	case <-cut:
		return false
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// BenchmarkOutboxPublish publishes batches of 256 persistent messages of
// 256 bytes to a durable queue, pipelined and confirmed: with a bare
// amqp091-go loop on a confirm channel (mandatory, MessageId set; all
// published, then every confirm awaited) and with the OutboxPublisher,
// alternating, in the same run. An op is one batch of each.
//
//	go test -run '^$' -bench BenchmarkOutboxPublish -benchtime 200x .
func BenchmarkOutboxPublish(b *testing.B) {
	const size = 256
	url := testenv.RabbitMQ.Addr(b)
	conn := dial(b, url)
	ch := channel(b, conn)
	q := "dedupt." + suffix() + ".outbox-bench"
	_, err := ch.QueueDeclare(q, true, false, false, false, nil)
	require.NoError(b, err)
	b.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false) })
	bare := channel(b, conn)
	require.NoError(b, bare.Confirm(false))
	p, err := dedupamqp.NewOutboxPublisher(url, nil)
	require.NoError(b, err)
	b.Cleanup(func() { _ = p.Close(context.Background()) })
	ctx := context.Background()
	body := bytes.Repeat([]byte("b"), 256)
	var bareTime, outboxTime time.Duration
	b.ResetTimer()
	for i := range b.N {
		msgs := outboxMessages(q, fmt.Sprint("bench-", i), size)
		for j := range msgs {
			msgs[j].Body = body
		}
		start := time.Now()
		dcs := make([]*amqp.DeferredConfirmation, 0, size)
		for _, m := range msgs {
			dc, err := bare.PublishWithDeferredConfirm("", q, true, false, amqp.Publishing{MessageId: m.ID, DeliveryMode: amqp.Persistent, Body: m.Body})
			require.NoError(b, err)
			dcs = append(dcs, dc)
		}
		for _, dc := range dcs {
			ok, err := dc.WaitContext(ctx)
			require.NoError(b, err)
			require.True(b, ok)
		}
		bareTime += time.Since(start)
		start = time.Now()
		require.NoError(b, p.Publish(ctx, msgs))
		outboxTime += time.Since(start)
		if i%16 == 15 {
			_, err := ch.QueuePurge(q, false)
			require.NoError(b, err)
		}
	}
	total := float64(b.N * size)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(total/bareTime.Seconds(), "bare-msgs/s")
	b.ReportMetric(total/outboxTime.Seconds(), "outbox-msgs/s")
	b.ReportMetric(bareTime.Seconds()/outboxTime.Seconds(), "ratio")
}
