package dedupamqp_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/outbox/outboxtest"
)

// TestOutboxPublisherEachReturned: PublishEach on a batch of routable
// messages with unroutable ones among them, through the default exchange
// and a topic exchange: each returned message is reported failed with the
// error Publish gives it (ErrReturned), never acknowledged (its
// basic.return comes before its basic.Ack), the others acknowledged, each
// once; and so for calls at once, each told of its own returns.
func TestOutboxPublisherEachReturned(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	conn := dial(t, url)
	q := outboxQueue(t, conn, nil)
	ex := outboxExchange(t, conn, amqp.ExchangeTopic)
	require.NoError(t, channel(t, conn).QueueBind(q, "orders.#", ex, false, nil))
	p := newOutboxPublisher(t, url, nil)
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()

	// batch returns n messages named after prefix, and which are routable.
	batch := func(prefix string, n, shift int) ([]outbox.Message, []bool) {
		msgs := outboxMessages(q, prefix, n)
		routable := make([]bool, n)
		for i := range msgs {
			switch (i + shift) % 5 {
			case 1:
				msgs[i].Destination = q + ".nobody"
			case 3:
				msgs[i].Destination = dedupamqp.OutboxDestination(ex, "refunds.created")
			case 0, 2:
				routable[i] = true
				msgs[i].Destination = dedupamqp.OutboxDestination(ex, "orders.created")
			default:
				routable[i] = true
			}
		}
		return msgs, routable
	}

	msgs, routable := batch("returned", 300, 0)
	r := outboxtest.NewReports(t, len(msgs))
	require.NoError(t, p.PublishEach(ctx, msgs, r.Ack), "every message reported")
	reported := r.Done()
	require.Len(t, reported, len(msgs), "every message reported")
	stored := 0
	for i, ok := range routable {
		if ok {
			stored++
			require.NoError(t, reported[i], "message %d (%s) acknowledged", i, msgs[i].Destination)
			continue
		}
		require.ErrorIs(t, reported[i], dedupamqp.ErrReturned, "message %d (%s)", i, msgs[i].Destination)
		require.NotErrorIs(t, reported[i], outbox.ErrPermanent, "message %d: a queue can be bound later", i)
	}
	eventually(t, "the routable messages stored", func() bool { return depth(t, conn, q) == stored })

	// Publish the same: the same outcome, the same errors.
	err := p.Publish(ctx, msgs)
	var be *outbox.BatchError
	require.ErrorAs(t, err, &be)
	require.Equal(t, routable, outbox.Acknowledged(err, len(msgs)))
	for i, e := range be.Errs {
		if e != nil {
			require.EqualError(t, reported[i], e.Error(), "message %d: PublishEach reports what Publish gives", i)
		}
	}
	eventually(t, "every routable message stored twice", func() bool { return depth(t, conn, q) == 2*stored })

	// Calls at once, on channels of their own.
	const calls, rounds = 4, 3
	var wg sync.WaitGroup
	failures := make(chan error, calls)
	for c := range calls {
		wg.Go(func() {
			for round := range rounds {
				msgs, routable := batch(fmt.Sprintf("c%d-r%d", c, round), 80, c+round)
				r := outboxtest.NewReports(t, len(msgs))
				if err := p.PublishEach(ctx, msgs, r.Ack); err != nil {
					failures <- fmt.Errorf("call %d round %d: %w", c, round, err)
					return
				}
				reported := r.Done()
				for i, ok := range routable {
					if err, in := reported[i]; !in || ok != (err == nil) || !ok && !errors.Is(err, dedupamqp.ErrReturned) {
						failures <- fmt.Errorf("call %d round %d: message %d (routable %v) reported %v (%v)", c, round, i, ok, in, err)
						return
					}
				}
			}
		})
	}
	testenv.Wait(t, &wg, "the calls")
	close(failures)
	for err := range failures {
		t.Error(err)
	}
}

// TestOutboxPublisherEachConnectionCut: the connection dies while a
// PublishEach awaits its confirms (the valve holds them, then cuts the
// connection): no message is reported, the call returns an error matching
// amqp.ErrClosed, nothing is reported after it returned, and the next call
// reconnects and reports every message acknowledged.
func TestOutboxPublisherEachConnectionCut(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	conn := dial(t, url)
	q := outboxQueue(t, conn, nil)
	v := startValve(t, url)
	p := newOutboxPublisher(t, "", &dedupamqp.OutboxOptions{Dial: v.dialer(t, url)})
	msgs := outboxMessages(q, "each-cut", 50)
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	first := outboxtest.NewReports(t, 1)
	require.NoError(t, p.PublishEach(ctx, msgs[:1], first.Ack), "connected")
	require.Equal(t, map[int]error{0: nil}, first.Done())

	v.down.hold() // the confirms stay in the valve
	r := outboxtest.NewReports(t, len(msgs))
	done := make(chan error, 1)
	go func() { done <- p.PublishEach(ctx, msgs, r.Ack) }()
	eventually(t, "the batch stored, its confirms held", func() bool { return depth(t, conn, q) == len(msgs)+1 })
	v.cut()
	err := testenv.Recv(t, done, "PublishEach to return after the cut")
	require.Empty(t, r.Done(), "no message reported: none was confirmed")
	require.ErrorIs(t, err, amqp.ErrClosed)
	require.NotErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, outbox.ErrPermanent)

	v.down.release()
	again := outboxtest.NewReports(t, len(msgs))
	require.NoError(t, p.PublishEach(ctx, msgs, again.Ack), "the next call reconnects")
	reported := again.Done()
	require.Len(t, reported, len(msgs))
	for i, err := range reported {
		require.NoError(t, err, "message %d", i)
	}
	require.Equal(t, int64(2), v.dials.Load())
	require.Equal(t, 2*len(msgs)+1, depth(t, conn, q), "every copy with its id, for the next consumer to drop")
}

// TestOutboxPublisherEachForcedClose: the broker closes the publisher's
// connection (rabbitmqctl close_connection) while PublishEach calls
// publish batch after batch: the call it hits returns an error matching
// amqp.ErrClosed, every message reported acknowledged (by any call) is in
// the queue, no message is reported twice or after its call returned, and
// the next calls reconnect.
func TestOutboxPublisherEachForcedClose(t *testing.T) {
	t.Parallel()
	forcedClose(t, "each-", func(ctx context.Context, p *dedupamqp.OutboxPublisher, msgs []outbox.Message) ([]bool, error) {
		r := outboxtest.NewReports(t, len(msgs))
		err := p.PublishEach(ctx, msgs, r.Ack)
		reported := r.Done()
		ok := make([]bool, len(msgs))
		for i, e := range reported {
			ok[i] = e == nil
		}
		if err == nil && len(reported) != len(msgs) {
			err = fmt.Errorf("PublishEach returned nil with %d of %d messages reported", len(reported), len(msgs))
		}
		return ok, err
	})
}

// TestOutboxPublisherEachStalled: a broker that stops answering (the
// valve holds its confirms) holds a PublishEach no longer than its
// context: it returns an error matching the context's, with no message
// reported; the next call, the broker back, reports them all.
func TestOutboxPublisherEachStalled(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	conn := dial(t, url)
	q := outboxQueue(t, conn, nil)
	v := startValve(t, url)
	p := newOutboxPublisher(t, "", &dedupamqp.OutboxOptions{Dial: v.dialer(t, url)})
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	require.NoError(t, p.Publish(ctx, outboxMessages(q, "each-first", 1)))

	v.down.hold()
	msgs := outboxMessages(q, "each-stalled", 10)
	r := outboxtest.NewReports(t, len(msgs))
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	done := make(chan error, 1)
	go func() { done <- p.PublishEach(short, msgs, r.Ack) }()
	err := testenv.Recv(t, done, "PublishEach to return at its context's end")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Empty(t, r.Done(), "nothing confirmed, nothing reported")
	v.down.release()

	again := outboxtest.NewReports(t, len(msgs))
	require.NoError(t, p.PublishEach(ctx, msgs, again.Ack))
	require.Len(t, again.Done(), len(msgs))
	require.Equal(t, int64(1), v.dials.Load(), "the connection was kept")
}

// TestOutboxPublisherMaxChannels: with MaxChannels 2, twelve PublishEach
// calls started at once (a relay keeps up to 256 in flight) all report
// every message acknowledged, and the broker counts no more than two
// channels on the publisher's connection (the publisher keeps the
// channels it opened, idle, for later calls). With the confirms held
// back and both channels taken, a call whose context ends while it waits
// for one returns the context's error, saying so, with nothing reported.
func TestOutboxPublisherMaxChannels(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	ctl := testenv.Binary(t, "rabbitmqctl", testenv.RabbitMQ.Start)
	conn := dial(t, url)
	q := outboxQueue(t, conn, nil)
	v := startValve(t, url)
	name := "dedupt-outbox-channels-" + suffix()
	through := v.url(t, url)
	p := newOutboxPublisher(t, "", &dedupamqp.OutboxOptions{MaxChannels: 2, Dial: func(ctx context.Context) (*amqp.Connection, error) {
		return amqp.DialConfig(through, amqp.Config{Properties: amqp.Table{"connection_name": name}})
	}})
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	require.NoError(t, p.Publish(ctx, outboxMessages(q, "channels-first", 1)))

	const calls, perCall = 12, 50
	reports := make([]*outboxtest.Reports, calls)
	errs := make(chan error, calls)
	start := make(chan struct{})
	for c := range calls {
		msgs := outboxMessages(q, fmt.Sprintf("channels-%d", c), perCall)
		reports[c] = outboxtest.NewReports(t, perCall)
		go func() {
			<-start
			errs <- p.PublishEach(ctx, msgs, reports[c].Ack)
		}()
	}
	close(start)
	for range calls {
		require.NoError(t, testenv.Recv(t, errs, "a PublishEach call to return"))
	}
	for c, r := range reports {
		got := r.Done()
		require.Len(t, got, perCall, "call %d", c)
		for i, err := range got {
			require.NoError(t, err, "call %d, message %d", c, i)
		}
	}
	require.Equal(t, 1+calls*perCall, depth(t, conn, q))
	require.LessOrEqual(t, channelsOf(t, ctl, name), 2, "channels open on the publisher's connection")

	// Both channels taken: two calls whose confirms are held back.
	v.down.hold()
	for c := range 2 {
		r := outboxtest.NewReports(t, perCall)
		msgs := outboxMessages(q, fmt.Sprintf("channels-held-%d", c), perCall)
		go func() { errs <- p.PublishEach(ctx, msgs, r.Ack) }()
	}
	eventually(t, "both held calls' messages stored", func() bool { return depth(t, conn, q) == 1+(calls+2)*perCall })
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	waiting := outboxtest.NewReports(t, 1)
	err := p.PublishEach(short, outboxMessages(q, "channels-waiting", 1), waiting.Ack)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "waiting for one of the publisher's 2 channels")
	require.Empty(t, waiting.Done(), "a call that got no channel reports nothing")
	v.down.release()
	for range 2 {
		require.NoError(t, testenv.Recv(t, errs, "a held call to return"))
	}
}

// channelsOf returns how many channels the broker counts on the
// connection named name.
func channelsOf(t *testing.T, ctl, name string) int {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), ctl, "-q", "list_connections", "--no-table-headers", "client_properties", "channels").CombinedOutput()
	require.NoError(t, err, "rabbitmqctl list_connections: %s", out)
	for line := range strings.SplitSeq(string(out), "\n") {
		if strings.Contains(line, `"`+name+`"`) {
			n, err := strconv.Atoi(strings.TrimSpace(line[strings.LastIndexByte(line, '\t')+1:]))
			require.NoError(t, err, "channels in %q", line)
			return n
		}
	}
	t.Fatalf("no connection named %s among:\n%s", name, out)
	return 0
}
