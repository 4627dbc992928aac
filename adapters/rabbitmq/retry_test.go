package dedupamqp_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/memstore"
)

// attemptLog records each run of a handler: when, and its envelope.
type attemptLog struct {
	mu   sync.Mutex
	runs []attemptRun
}

type attemptRun struct {
	at  time.Time
	env dedup.Message[Order]
}

func (l *attemptLog) add(m *dedup.Message[Order]) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs = append(l.runs, attemptRun{at: time.Now(), env: *m})
	return len(l.runs)
}

func (l *attemptLog) all() []attemptRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]attemptRun(nil), l.runs...)
}

// TestRetryTier: a handler failure whose backoff is longer than
// InPlaceRetryMax goes through the retry tier: republished to the tier's
// queue (confirmed), the original acknowledged, and back in the work queue
// no sooner than the tier's delay, as a new message carrying the same
// MessageId, dedup-retries 1 and where it was first published.
func TestRetryTier(t *testing.T) {
	t.Parallel()
	forEachQueueType(t, func(t *testing.T, typ dedupamqp.QueueType) {
		const tier = 400 * time.Millisecond
		url := testenv.RabbitMQ.Addr(t)
		top := declare(t, url, dedupamqp.Topology{Type: typ, RetryTiers: []time.Duration{tier, 10 * time.Second}})
		conn := dial(t, url)
		var log attemptLog
		done := make(chan struct{})
		charge := func(_ context.Context, m *dedup.Message[Order]) (struct{}, error) {
			if log.add(m) == 1 {
				return struct{}{}, errors.New("gateway timeout")
			}
			close(done)
			return struct{}{}, nil
		}
		store, err := memstore.New(nil)
		require.NoError(t, err)
		cfg := fastConfig("tier")
		cfg.Backoff = dedup.BackoffFunc(func(int) time.Duration { return 300 * time.Millisecond })
		var ev events
		cfg.Observer = &ev
		rcv, err := dedup.NewReceiver(store, idstrategy.MessageID[Order](), charge, cfg)
		require.NoError(t, err)
		opts := top.Options()
		opts.InPlaceRetryMax = 50 * time.Millisecond
		c, err := dedupamqp.NewConsumer(url, top.Queue, rcv, opts)
		require.NoError(t, err)
		require.NoError(t, c.Start(t.Context()))
		stopAtCleanup(t, c)

		publishAll(t, conn, top.Queue, []amqp.Publishing{{
			MessageId: "m-1", Body: orderJSON(t, Order{ID: "o-1"}), Type: "order.created",
			// Headers of another spelling are not dedup's: AMQP table keys
			// are case-sensitive, and only the canonical names are read.
			Headers: amqp.Table{"tenant": "acme", "dedup-retries": int32(5), "dedup-original-routing-key": "elsewhere"},
		}})
		testenv.Recv(t, done, "the retried delivery")
		eventually(t, "both deliveries settled", func() bool { return ev.count() == 2 })

		runs := log.all()
		require.Len(t, runs, 2)
		require.GreaterOrEqual(t, runs[1].at.Sub(runs[0].at), tier, "back before the tier's TTL")
		first, second := runs[0].env, runs[1].env
		require.Equal(t, 1, first.DeliveryCount)
		require.Equal(t, "m-1", second.ID)
		require.Equal(t, 1, second.DeliveryCount, "a tier's return is a new message")
		require.False(t, second.Redelivered)
		retries, _ := second.HeaderValue(dedupamqp.HeaderRetries)
		require.Equal(t, "1", retries)
		reason, _ := second.HeaderValue(dedupamqp.HeaderRetryReason)
		require.Equal(t, "handler-error", reason)
		rk, _ := second.HeaderValue(dedupamqp.HeaderOriginalRoutingKey)
		require.Equal(t, top.Queue, rk)
		sd, _ := dedupamqp.Native(&second)
		require.EqualValues(t, 1, sd.Headers["Dedup-Retries"], "the canonical spelling, counted from none")
		require.Equal(t, "handler-error", sd.Headers["Dedup-Retry-Reason"])
		require.Equal(t, top.Queue, sd.Headers["Dedup-Original-Routing-Key"])
		require.Equal(t, "", sd.Headers["Dedup-Original-Exchange"])
		death, ok := second.HeaderValue("x-death")
		require.True(t, ok, "the broker dead-letters the expired copy back")
		require.Contains(t, death, adapter.RetryName(top.Queue, tier), "not the tier at least as long as the delay")
		tenant, _ := second.HeaderValue("tenant")
		require.Equal(t, "acme", tenant)
		d, ok := dedupamqp.Native(&second)
		require.True(t, ok)
		require.Equal(t, "order.created", d.Type)
		if n, ok := second.HeaderValue("x-delivery-count"); ok {
			require.Equal(t, "0", n, "the first delivery's x-delivery-count was copied into the retry")
		}

		evs := ev.snapshot()
		require.Equal(t, delivery.Retry, evs[0].Decision.Action)
		require.ErrorContains(t, evs[0].Err, "gateway timeout", "the retry was carried out: Err is the handler's")
		require.NotErrorIs(t, evs[0].Err, dedupamqp.ErrReturned)
		require.Equal(t, delivery.ReasonProcessed, evs[1].Decision.Reason)
		st := c.Stats()
		require.EqualValues(t, 1, st.RetriedLater)
		require.Zero(t, st.RetriedInPlace)
		require.Zero(t, depth(t, conn, adapter.RetryName(top.Queue, tier)))
	})
}

// TestMaxAttemptsDeadLetter: a message whose handler always fails is
// retried in place (Reject, requeue) and dead-lettered after MaxAttempts
// runs, with its attempt count, key, reason and error; on a quorum queue
// the broker counted each Reject (x-delivery-count).
func TestMaxAttemptsDeadLetter(t *testing.T) {
	t.Parallel()
	forEachQueueType(t, func(t *testing.T, typ dedupamqp.QueueType) {
		url := testenv.RabbitMQ.Addr(t)
		top := declare(t, url, dedupamqp.Topology{Type: typ})
		conn := dial(t, url)
		// A classic queue tapping the dead letters: it adds no
		// x-delivery-count of its own, so one there was copied.
		tap := top.Queue + ".tap"
		admin := channel(t, conn)
		_, err := admin.QueueDeclare(tap, false, false, true, false, amqp.Table{"x-queue-type": "classic"}) // exclusive: gone with conn
		require.NoError(t, err)
		require.NoError(t, admin.QueueBind(tap, top.Queue, top.DeadLetterExchange, false, nil))
		var log attemptLog
		fail := func(_ context.Context, m *dedup.Message[Order]) (struct{}, error) {
			n := log.add(m)
			return struct{}{}, fmt.Errorf("card declined (run %d)", n)
		}
		store, err := memstore.New(nil)
		require.NoError(t, err)
		cfg := fastConfig("attempts")
		cfg.MaxAttempts = 3
		rcv, err := dedup.NewReceiver(store, idstrategy.MessageID[Order](), fail, cfg)
		require.NoError(t, err)
		c, err := dedupamqp.NewConsumer(url, top.Queue, rcv, top.Options())
		require.NoError(t, err)
		require.NoError(t, c.Start(t.Context()))
		stopAtCleanup(t, c)
		published := time.Now().Truncate(time.Millisecond)
		publishAll(t, conn, top.Queue, []amqp.Publishing{{MessageId: "m-1", Body: orderJSON(t, Order{ID: "o-1"})}})

		dead := getAll(t, conn, top.DeadLetterQueue, 1)[0]
		require.Len(t, log.all(), 3, "the handler must run MaxAttempts times")
		require.Equal(t, "attempts-exhausted", dead.Headers[delivery.HeaderReason])
		require.EqualValues(t, 3, dead.Headers[delivery.HeaderAttempt])
		require.Equal(t, "attempts:m-1", dead.Headers[delivery.HeaderKey])
		require.EqualValues(t, 3, dead.Headers["Dedup-Attempt"])
		require.Equal(t, "attempts:m-1", dead.Headers["Dedup-Key"])
		require.Contains(t, dead.Headers[delivery.HeaderError], "card declined (run 3)")
		at, err := time.Parse("2006-01-02T15:04:05.000Z07:00", fmt.Sprint(dead.Headers[delivery.HeaderDeadLetteredAt]))
		require.NoError(t, err, "the dead letter says when it was made")
		require.False(t, at.Before(published) || at.After(time.Now()), "dead-lettered at %v: not between the publish (%v) and now", at, published)
		require.Equal(t, "m-1", dead.MessageId)
		if n, ok := dead.Headers["x-delivery-count"]; ok {
			require.Equal(t, dedupamqp.Quorum, typ, "the work queue's x-delivery-count was copied into the dead letter")
			require.EqualValues(t, 0, n, "the work queue's x-delivery-count was copied into the dead letter")
		}
		counts := []int{}
		for _, r := range log.all() {
			counts = append(counts, r.env.DeliveryCount)
		}
		if typ == dedupamqp.Quorum {
			require.Equal(t, []int{1, 2, 3}, counts)
			require.EqualValues(t, 3, dead.Headers[delivery.HeaderDeliveryCount])
		} else {
			require.Equal(t, []int{1, 0, 0}, counts, "a classic queue does not count: 0 once redelivered")
		}
		require.True(t, log.all()[2].env.Redelivered)
		tapped := getAll(t, conn, tap, 1)[0]
		require.NotContains(t, tapped.Headers, "x-delivery-count", "the work queue's x-delivery-count was copied into the dead letter")
		require.Equal(t, "attempts-exhausted", tapped.Headers[delivery.HeaderReason])
		require.EqualValues(t, 2, c.Stats().RetriedInPlace)
		require.Zero(t, depth(t, conn, top.Queue))
	})
}

// TestDropPoison: with DropPoison, poison is rejected without requeue and
// the queue's own dead-letter exchange takes it, with the broker's x-death
// (and no dedup reason).
func TestDropPoison(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	top := declare(t, url, dedupamqp.Topology{})
	conn := dial(t, url)
	store, err := memstore.New(nil)
	require.NoError(t, err)
	var ev events
	cfg := fastConfig("reject")
	cfg.Observer = &ev
	rcv, err := dedup.NewReceiver(store, idstrategy.MessageID[Order](),
		func(context.Context, *dedup.Message[Order]) (struct{}, error) { return struct{}{}, nil }, cfg)
	require.NoError(t, err)
	c, err := dedupamqp.NewConsumer(url, top.Queue, rcv, &dedupamqp.Options{DropPoison: true})
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)
	publishAll(t, conn, top.Queue, []amqp.Publishing{{MessageId: "m-1", Body: []byte("not json")}})
	dead := getAll(t, conn, top.DeadLetterQueue, 1)[0]
	require.Equal(t, []byte("not json"), dead.Body)
	require.Contains(t, dead.Headers, "x-death")
	require.NotContains(t, dead.Headers, delivery.HeaderReason)
	eventually(t, "the delivery settled", func() bool { return ev.count() == 1 })
	require.Equal(t, delivery.ReasonUndecodable, ev.snapshot()[0].Decision.Reason)
	require.EqualValues(t, 1, c.Stats().PoisonDropped, "rejected: the broker, not the consumer, dead-letters it")
	require.Zero(t, c.Stats().DeadLettered)
}

// TestDropPoisonWithoutDeadLetterExchange: with DropPoison on a queue
// without an x-dead-letter-exchange, the broker drops the rejected poison.
func TestDropPoisonWithoutDeadLetterExchange(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	conn := dial(t, url)
	queue := "dedupt." + suffix() + ".plain"
	_, err := channel(t, conn).QueueDeclare(queue, false, false, false, false, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		conn, err := amqp.Dial(url)
		if err != nil {
			return
		}
		defer conn.Close()
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(queue, false, false, false)
		}
	})
	store, err := memstore.New(nil)
	require.NoError(t, err)
	var ev events
	cfg := fastConfig("drop")
	cfg.Observer = &ev
	rcv, err := dedup.NewReceiver(store, idstrategy.MessageID[Order](),
		func(context.Context, *dedup.Message[Order]) (struct{}, error) { return struct{}{}, nil }, cfg)
	require.NoError(t, err)
	c, err := dedupamqp.NewConsumer(url, queue, rcv, &dedupamqp.Options{DropPoison: true})
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)
	publishAll(t, conn, queue, []amqp.Publishing{{MessageId: "m-1", Body: []byte("not json")}})
	eventually(t, "the delivery settled", func() bool { return ev.count() == 1 })
	require.Equal(t, delivery.DeadLetter, ev.snapshot()[0].Decision.Action)
	require.NoError(t, ev.snapshot()[0].SettleErr)
	ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	require.NoError(t, c.Stop(ctx))
	require.Zero(t, depth(t, conn, queue), "dropped, not requeued")
	require.EqualValues(t, 1, c.Stats().PoisonDropped)
}

// TestDeadLetterUnroutable: a dead letter the broker returns (no queue
// bound to the dead-letter exchange) is not counted as delivered: the
// original is requeued, and reaches the dead-letter queue once one is
// bound again. Nothing is lost.
func TestDeadLetterUnroutable(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	top := declare(t, url, dedupamqp.Topology{})
	conn := dial(t, url)
	admin := channel(t, conn)
	require.NoError(t, admin.QueueUnbind(top.DeadLetterQueue, top.Queue, top.DeadLetterExchange, nil))

	store, err := memstore.New(nil)
	require.NoError(t, err)
	var ev events
	cfg := fastConfig("unroutable")
	cfg.Observer = &ev
	rcv, err := dedup.NewReceiver(store, idstrategy.MessageID[Order](),
		func(context.Context, *dedup.Message[Order]) (struct{}, error) { return struct{}{}, nil }, cfg)
	require.NoError(t, err)
	opts := top.Options()
	opts.InPlaceRetryMax = 50 * time.Millisecond
	c, err := dedupamqp.NewConsumer(url, top.Queue, rcv, opts)
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)
	publishAll(t, conn, top.Queue, []amqp.Publishing{{MessageId: "m-1", Body: []byte("not json")}})

	eventually(t, "dead letters returned", func() bool { return c.Stats().SettleFailures >= 2 })
	first := ev.snapshot()[0]
	require.Equal(t, delivery.DeadLetter, first.Decision.Action)
	require.True(t, first.Settled)
	require.ErrorIs(t, first.Err, dedup.ErrUndecodable, "Err is the receiver's")
	require.ErrorIs(t, first.SettleErr, dedupamqp.ErrDeadLetter)
	require.ErrorIs(t, first.SettleErr, dedupamqp.ErrReturned)
	require.Zero(t, c.Stats().DeadLettered, "a returned dead letter counted as delivered")

	require.NoError(t, admin.QueueBind(top.DeadLetterQueue, top.Queue, top.DeadLetterExchange, false, nil))
	dead := getAll(t, conn, top.DeadLetterQueue, 1)[0]
	require.Equal(t, "undecodable", dead.Headers[delivery.HeaderReason])
	eventually(t, "the original acknowledged", func() bool { return c.Stats().DeadLettered == 1 })
	require.Zero(t, depth(t, conn, top.Queue))
	require.Zero(t, depth(t, conn, top.DeadLetterQueue), "one dead letter, not one per attempt")
}

// TestHandlerCancelledOnce checks the in-place hold ends early at Stop: a
// retry held for a long delay is requeued at once when the consumer stops.
func TestHoldEndsAtStop(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	top := declare(t, url, dedupamqp.Topology{})
	conn := dial(t, url)
	var runs atomic.Int64
	store, err := memstore.New(nil)
	require.NoError(t, err)
	cfg := fastConfig("hold")
	cfg.Backoff = dedup.BackoffFunc(func(int) time.Duration { return time.Hour })
	rcv, err := dedup.NewReceiver(store, idstrategy.MessageID[Order](),
		func(context.Context, *dedup.Message[Order]) (struct{}, error) {
			runs.Add(1)
			return struct{}{}, errors.New("down")
		}, cfg)
	require.NoError(t, err)
	opts := top.Options()
	opts.InPlaceRetryMax = time.Hour
	opts.ConsumerTimeout = 2 * time.Hour
	c, err := dedupamqp.NewConsumer(url, top.Queue, rcv, opts)
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	publishAll(t, conn, top.Queue, []amqp.Publishing{{MessageId: "m-1", Body: orderJSON(t, Order{ID: "o-1"})}})
	eventually(t, "the handler to fail", func() bool { return runs.Load() == 1 })
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	require.NoError(t, c.Stop(ctx), "Stop must not wait for a held retry's delay")
	require.Equal(t, 1, depth(t, conn, top.Queue))
	require.EqualValues(t, 1, c.Stats().RetriedInPlace)
}
