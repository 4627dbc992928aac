package dedupamqp_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/redisstore"
)

// outageRig is a consumer of a quorum queue with x-delivery-limit 5 over a
// redis-server of the test's own, whose handler counts its effects.
type outageRig struct {
	srv     *redistest.Server
	top     dedupamqp.Topology
	conn    *amqp.Connection
	c       *dedupamqp.Consumer[Order, struct{}]
	ev      events
	logs    logs
	mu      sync.Mutex
	effects map[string]int
}

func newOutageRig(t *testing.T, cfg *dedup.Config, opts func(*dedupamqp.Options)) *outageRig {
	t.Helper()
	url := testenv.RabbitMQ.Addr(t)
	r := &outageRig{srv: redistest.StartServer(t), effects: map[string]int{}}
	// Dials of its own are bounded too: go-redis dials in the background,
	// and a dial to a hung server would outlive the test.
	client := redis.NewClient(&redis.Options{Addr: r.srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: 300 * time.Millisecond, DialerRetries: 1})
	t.Cleanup(func() { _ = client.Close() })
	st, err := redisstore.New(t.Context(), client, &redisstore.Options{Timeout: 300 * time.Millisecond})
	require.NoError(t, err)
	r.top = declare(t, url, dedupamqp.Topology{Type: dedupamqp.Quorum, DeliveryLimit: 5})
	r.conn = dial(t, url)
	charge := func(ctx context.Context, m *dedup.Message[Order]) (struct{}, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.effects[m.Body.ID]++
		return struct{}{}, ctx.Err()
	}
	cfg.Observer = &r.ev
	rcv, err := dedup.NewReceiver(st, idstrategy.BodyField("id", func(o Order) string { return o.ID }), charge, cfg)
	require.NoError(t, err)
	o := r.top.Options()
	o.Logger = slog.New(r.logs.handler())
	if opts != nil {
		opts(o)
	}
	r.c, err = dedupamqp.NewConsumer(url, r.top.Queue, rcv, o)
	require.NoError(t, err)
	return r
}

func (r *outageRig) publish(t *testing.T, from, to int) {
	t.Helper()
	var msgs []amqp.Publishing
	for i := from; i < to; i++ {
		id := fmt.Sprintf("o-%02d", i)
		msgs = append(msgs, amqp.Publishing{MessageId: id, Body: orderJSON(t, Order{ID: id})})
	}
	publishAll(t, r.conn, r.top.Queue, msgs)
}

func (r *outageRig) charged() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.effects))
	for k, v := range r.effects {
		out[k] = v
	}
	return out
}

// storeDownHolds counts the deliveries the consumer held in place because
// the store was down.
func (r *outageRig) storeDownHolds() int { return r.ev.reasons()[delivery.ReasonStoreUnavailable] }

// TestStoreOutageDeadLettersNothing: a store outage of 10 s (the Redis
// killed, then started again) and of 60 s (the Redis hung, SIGSTOP, then
// resumed), on a quorum queue with x-delivery-limit 5 of the local
// RabbitMQ 3.10, which counts Nack(requeue) as well as Reject(requeue)
// towards it. A delivery the store cannot take is held unacknowledged and
// tried again in place every StoreRetryDelay (100 ms here: dozens of tries
// per delivery); nothing is returned to the queue, so nothing is counted:
// 0 dead letters, 0 lost, 0 doubles, and every order processed on its
// first delivery (x-delivery-count absent). The 60 s outage runs in every
// test run (the two run in parallel: about 65 s of the module's time).
func TestStoreOutageDeadLettersNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		outage time.Duration
		hang   bool
	}{
		{"killed for 10s", 10 * time.Second, false},
		{"hung for 60s", 60 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const before, orders = 4, 24
			r := newOutageRig(t, fastConfig("outage"), func(o *dedupamqp.Options) {
				o.Concurrency = 4
				o.Prefetch = 8 // four more wait for a worker: on the consumer_timeout clock too
			})
			require.NoError(t, r.c.Start(t.Context()))
			stopAtCleanup(t, r.c)
			r.publish(t, 0, before)
			eventually(t, "the orders before the outage charged", func() bool { return len(r.charged()) == before })

			began := time.Now()
			if tc.hang {
				r.srv.Pause()
			} else {
				r.srv.Stop()
			}
			r.publish(t, before, orders)
			eventually(t, "every worker holding a delivery", func() bool { return r.storeDownHolds() >= 40 })
			time.Sleep(time.Until(began.Add(tc.outage)))
			require.Len(t, r.charged(), before, "a handler ran while the store was down (fail-closed)")
			require.Zero(t, depth(t, r.conn, r.top.DeadLetterQueue), "dead letters during the outage")
			if tc.hang {
				r.srv.Resume()
			} else {
				r.srv.Start()
			}

			eventually(t, "every order charged", func() bool { return len(r.charged()) == orders })
			eventually(t, "the queue drained", func() bool { return depth(t, r.conn, r.top.Queue) == 0 })
			settledBy := time.Now().Add(testenv.WaitTimeout)
			for r.ev.reasons()[delivery.ReasonProcessed] < orders {
				if time.Now().After(settledBy) {
					t.Fatalf("timed out after %v waiting for every delivery settled: settled by reason %v, charged %v", testenv.WaitTimeout, r.ev.reasons(), r.charged())
				}
				time.Sleep(20 * time.Millisecond)
			}
			stopCtx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
			defer cancel()
			require.NoError(t, r.c.Stop(stopCtx))

			for id, n := range r.charged() {
				require.Equal(t, 1, n, "order %s charged %d times", id, n)
			}
			require.Zero(t, depth(t, r.conn, r.top.DeadLetterQueue), "dead letters")
			require.Zero(t, r.c.Stats().DeadLettered)
			for _, e := range r.ev.snapshot() {
				switch e.Decision.Reason {
				case delivery.ReasonProcessed:
					require.Equal(t, 1, e.DeliveryCount, "order %s was returned to the queue before it was processed", e.MessageID)
				case delivery.ReasonStoreUnavailable:
					require.Equal(t, delivery.Retry, e.Decision.Action)
					require.ErrorIs(t, e.Err, dedup.ErrStoreUnavailable)
				default:
					t.Fatalf("unexpected decision %+v for %s", e.Decision, e.MessageID)
				}
			}
			require.Greater(t, r.storeDownHolds(), 2*(orders-before), "each delivery tried again in place")
			require.Empty(t, r.logs.contains("returning it to the queue"))
		})
	}
}

// TestStoreOutageReturnsBeforeConsumerTimeout: a delivery held because the
// store is down is returned to the queue when another wait would take it
// past ConsumerTimeout (less the lease and InPlaceRetryMax), so that the
// broker never closes the channel over it, and only then: between two
// returns it is tried in place several times. With ConsumerTimeout 6 s, a
// lease of 2 s and InPlaceRetryMax 1 s, a delivery is held for about 3 s
// each time, tried every 100 ms plus the time the store takes to fail.
func TestStoreOutageReturnsBeforeConsumerTimeout(t *testing.T) {
	t.Parallel()
	r := newOutageRig(t, fastConfig("horizon"), func(o *dedupamqp.Options) {
		o.Concurrency = 1
		o.ConsumerTimeout = 6 * time.Second
	})
	r.srv.Stop()
	r.publish(t, 0, 1)
	require.NoError(t, r.c.Start(t.Context()))
	stopAtCleanup(t, r.c)
	eventually(t, "two returns to the queue", func() bool { return len(r.logs.contains("returning it to the queue")) >= 2 })
	r.srv.Start()
	eventually(t, "the order charged", func() bool { return len(r.charged()) == 1 })
	eventually(t, "the delivery settled", func() bool { return r.ev.reasons()[delivery.ReasonProcessed] == 1 })
	stopCtx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	require.NoError(t, r.c.Stop(stopCtx))

	returns := len(r.logs.contains("returning it to the queue"))
	var processed delivery.Event
	for _, e := range r.ev.snapshot() {
		if e.Decision.Reason == delivery.ReasonProcessed {
			processed = e
		}
	}
	// RabbitMQ 3.10 counts each Nack in x-delivery-count: the delivery
	// that was processed tells how many times it was returned.
	require.GreaterOrEqual(t, processed.DeliveryCount-1, 2, "returned to the queue before ConsumerTimeout")
	require.Equal(t, returns, processed.DeliveryCount-1)
	// Every return is reported as a settled retry too, after the holds.
	holds := r.storeDownHolds() - returns
	require.GreaterOrEqual(t, holds, 3*returns, "held and tried in place between returns, not returned at once")
	require.Equal(t, map[string]int{"o-00": 1}, r.charged())
	require.Zero(t, depth(t, r.conn, r.top.DeadLetterQueue))
}

// TestStoreOutageHoldsCountFromArrival: the ConsumerTimeout horizon counts
// from when a delivery arrived, not from when a worker took it: with one
// worker and a prefetch of 3, two deliveries wait behind the one held, on
// the broker's consumer_timeout clock all along, and are returned in time
// too. On the wire, from basic.deliver to its nack, no delivery stays
// unsettled as long as ConsumerTimeout (6 s; each is held about 3 s).
func TestStoreOutageHoldsCountFromArrival(t *testing.T) {
	t.Parallel()
	const timeout = 6 * time.Second
	uri, err := amqp.ParseURI(testenv.RabbitMQ.Addr(t))
	require.NoError(t, err)
	sn := startSniffer(t, net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port)))
	uri.Host, uri.Port = "127.0.0.1", sn.ln.Addr().(*net.TCPAddr).Port
	r := newOutageRig(t, fastConfig("arrival"), func(o *dedupamqp.Options) {
		o.Concurrency = 1
		o.Prefetch = 3
		o.ConsumerTimeout = timeout
		o.Dial = dedupamqp.DialURL(uri.String())
	})
	r.srv.Stop()
	r.publish(t, 0, 3)
	require.NoError(t, r.c.Start(t.Context()))
	stopAtCleanup(t, r.c)
	eventually(t, "each delivery returned once", func() bool { return len(r.logs.contains("returning it to the queue")) >= 4 })
	r.srv.Start()
	eventually(t, "the orders charged", func() bool { return len(r.charged()) == 3 })
	stopCtx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	require.NoError(t, r.c.Stop(stopCtx))
	t.Logf("longest unsettled: %v", sn.longestUnsettled())
	require.Less(t, sn.longestUnsettled(), timeout, "a delivery held past ConsumerTimeout: the broker would close the channel")
	require.Equal(t, map[string]int{"o-00": 1, "o-01": 1, "o-02": 1}, r.charged())
}
