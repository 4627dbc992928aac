package dedupamqp_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/tcpproxy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/memstore"
)

// TestConnectionCut cuts the consumer off from the broker (a TCP proxy the
// test closes) while handlers run, keeps it cut through failed reconnects,
// then lets it through a new proxy. Nothing may be lost or doubled, the
// handlers running at the cut must have had their context cancelled, and
// no acknowledgement of a delivery of the old channel may reach the new
// one: the broker would close the channel with PRECONDITION_FAILED
// (unknown delivery tag), which the consumer logs as a lost channel.
func TestConnectionCut(t *testing.T) {
	t.Parallel()
	forEachQueueType(t, func(t *testing.T, typ dedupamqp.QueueType) {
		const orders = 1500
		url := testenv.RabbitMQ.Addr(t)
		uri, err := amqp.ParseURI(url)
		require.NoError(t, err)
		target := net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port))
		top := declare(t, url, dedupamqp.Topology{Type: typ})
		conn := dial(t, url)

		var proxy atomic.Pointer[tcpproxy.Proxy]
		proxy.Store(tcpproxy.Start(t, target))
		var dials atomic.Int64
		dialer := func(ctx context.Context) (*amqp.Connection, error) {
			dials.Add(1)
			u := uri
			host, port, _ := net.SplitHostPort(proxy.Load().Addr())
			u.Host = host
			u.Port, _ = strconv.Atoi(port)
			return dedupamqp.DialURL(u.String())(ctx)
		}

		// Once blocking is set, handlers wait for the cut: their context
		// must be cancelled when their channel dies. They then go on as a
		// handler that ignores its context would, and succeed after the
		// consumer reconnected: their deliveries (which the broker has
		// redelivered on the new channel by then) must not be acknowledged
		// on the new channel, where their tags mean nothing or another
		// message.
		var (
			charged   deduptest.Effects
			blocking  atomic.Bool
			blocked   atomic.Int64
			cancelled atomic.Int64
			release   = make(chan struct{})
		)
		charge := func(ctx context.Context, m *dedup.Message[Order]) (struct{}, error) {
			if blocking.Load() {
				blocked.Add(1)
				select {
				case <-ctx.Done():
					cancelled.Add(1)
				case <-time.After(testenv.WaitTimeout):
					return struct{}{}, fmt.Errorf("not cancelled at the cut")
				}
				select {
				case <-release:
				case <-time.After(testenv.WaitTimeout):
					return struct{}{}, fmt.Errorf("not released")
				}
			}
			time.Sleep(time.Millisecond)
			charged.Record(m.Body.ID)
			return struct{}{}, nil
		}
		store, err := memstore.New(nil)
		require.NoError(t, err)
		var lg logs
		cfg := fastConfig("cut")
		cfg.Logger = slogNew(lg.handler())
		rcv, err := dedup.NewReceiver(store, idstrategy.MessageID[Order](), charge, cfg)
		require.NoError(t, err)
		opts := top.Options()
		opts.Dial = dialer
		opts.ReconnectBackoff = dedup.BackoffFunc(func(int) time.Duration { return 50 * time.Millisecond })
		c, err := dedupamqp.NewConsumer("", top.Queue, rcv, opts)
		require.NoError(t, err)

		var msgs []amqp.Publishing
		var ids []string
		for i := range orders {
			id := fmt.Sprintf("o-%05d", i)
			msgs = append(msgs, amqp.Publishing{MessageId: id, Body: orderJSON(t, Order{ID: id, Cents: i})})
			ids = append(ids, id)
		}
		publishAll(t, conn, top.Queue, msgs)
		require.NoError(t, c.Start(t.Context()))
		stopAtCleanup(t, c)

		eventually(t, "a third of the orders charged", func() bool { return charged.Len() >= orders/3 })
		blocking.Store(true)
		eventually(t, "every worker blocked in its handler", func() bool { return blocked.Load() == int64(dedupamqp.DefaultConcurrency) })
		proxy.Load().Cut()
		eventually(t, "the blocked handlers cancelled", func() bool { return cancelled.Load() == blocked.Load() })
		eventually(t, "reconnect attempts failing against the cut proxy", func() bool {
			return len(lg.contains("reconnect failed")) >= 2
		})
		atCut := charged.Len()
		blocking.Store(false)
		proxy.Store(tcpproxy.Start(t, target))
		// Their redeliveries wait for them (one key, one process), so
		// release them once the new session is there.
		eventually(t, "the consumer on a new connection", func() bool { return c.Stats().Reconnects >= 1 })
		close(release) // the old session's handlers succeed now

		eventually(t, "every order charged", func() bool { return charged.Len() == orders })
		eventually(t, "the queue drained", func() bool { return depth(t, conn, top.Queue) == 0 })
		require.NoError(t, c.Stop(t.Context()))
		require.NoError(t, c.Err())

		charged.ExactlyOnce(ids...).Check(t)
		require.Less(t, atCut, orders, "the cut came after the work was done")

		st := c.Stats()
		require.GreaterOrEqual(t, st.Reconnects, uint64(1))
		require.GreaterOrEqual(t, st.StaleDeliveries, uint64(dedupamqp.DefaultConcurrency), "the old channel's deliveries were settled somewhere")
		require.Equal(t, int64(dedupamqp.DefaultConcurrency), cancelled.Load(), "handlers running at the cut were not cancelled")
		for _, bad := range []string{"PRECONDITION_FAILED", "unknown delivery tag", "Exception (406)"} {
			require.Empty(t, lg.contains(bad), "an acknowledgement reached a channel it did not belong to")
		}
		require.NotEmpty(t, lg.contains("connection lost"))
		t.Logf("%s: %+v, %d dials, %d handlers cancelled at the cut", typ, st, dials.Load(), cancelled.Load())
	})
}
