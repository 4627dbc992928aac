package dedupnats_test

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/memstore"
)

// originReceiver returns a receiver reporting to obs whose handler
// succeeds, unless its context ended.
func originReceiver(t *testing.T, obs delivery.Observer) *dedup.Receiver[*dedup.Message[Order], Receipt] {
	t.Helper()
	store, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(store, bodyID, func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		return Receipt{OrderID: m.Body.ID}, ctx.Err()
	}, observed(fastConfig("origin"), obs))
	require.NoError(t, err)
	return rcv
}

// serverOf is the host and port of a NATS URL.
func serverOf(t *testing.T, u string) (string, int) {
	t.Helper()
	p, err := url.Parse(u)
	require.NoError(t, err)
	port, err := strconv.Atoi(p.Port())
	require.NoError(t, err)
	return p.Hostname(), port
}

// templateBySubject maps each event's subject to its template, checking
// that every event names the server and the group.
func templateBySubject(t *testing.T, events []traced, host string, port int, group string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, e := range events {
		require.Equal(t, host, e.ServerAddress, "server.address of %s", e.Source)
		require.Equal(t, port, e.ServerPort, "server.port of %s", e.Source)
		require.Equal(t, group, e.ConsumerGroup, "the group of %s", e.Source)
		out[e.Source] = e.DestinationTemplate
	}
	return out
}

// TestJetStreamOrigin: a Consumer's deliveries name the server its
// connection is connected to, the JetStream consumer as their group, and
// their subject's template: the consumer's filter subject, or without a
// filter the stream's subject the message's matches (a literal subject is
// its own template), or Options.DestinationTemplate.
func TestJetStreamOrigin(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, u string) {
		_, js := connect(t, u)
		host, port := serverOf(t, u)
		n := newNames()
		orders, refunds := n.subject+".*", n.subject+"-refunds"
		_, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: n.stream, Subjects: []string{orders, refunds}, Storage: jetstream.MemoryStorage})
		require.NoError(t, err)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := js.DeleteStream(ctx, n.stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) && !errors.Is(err, natsgo.ErrConnectionClosed) {
				t.Logf("delete stream %s: %v", n.stream, err)
			}
		})
		for i, subject := range []string{n.subject + ".1", n.subject + ".2", refunds} {
			_, err := js.Publish(t.Context(), subject, orderJSON(t, Order{ID: "o-" + strconv.Itoa(i)}))
			require.NoError(t, err)
		}

		run := func(t *testing.T, durable string, filter string, opts dedupnats.Options, want int) map[string]string {
			t.Helper()
			cons, err := js.CreateOrUpdateConsumer(t.Context(), n.stream, jetstream.ConsumerConfig{
				Durable: durable, FilterSubject: filter, AckPolicy: jetstream.AckExplicitPolicy,
			})
			require.NoError(t, err)
			obs := &fakeTracer{}
			opts.DropPoison = true
			c, err := dedupnats.NewConsumer(js, cons, originReceiver(t, obs), &opts)
			require.NoError(t, err)
			require.NoError(t, c.Start(t.Context()))
			stopAtCleanup(t, c)
			events := obs.waitEvents(t, want)
			require.Len(t, events, want)
			return templateBySubject(t, events, host, port, durable)
		}

		require.Equal(t, map[string]string{n.subject + ".1": orders, n.subject + ".2": orders},
			run(t, n.consumer+"_filter", orders, dedupnats.Options{}, 2), "the filter subject")
		require.Equal(t, map[string]string{n.subject + ".1": orders, n.subject + ".2": orders, refunds: refunds},
			run(t, n.consumer+"_all", "", dedupnats.Options{}, 3), "the stream's subject each matches")
		require.Equal(t, map[string]string{n.subject + ".1": "orders.{id}", n.subject + ".2": "orders.{id}", refunds: "orders.{id}"},
			run(t, n.consumer+"_given", "", dedupnats.Options{DestinationTemplate: "orders.{id}"}, 3), "the option")
	})
}

// TestSubscriberOrigin: a Subscriber's deliveries name the server, its
// queue group as their group (none without one), and its subject as their
// template.
func TestSubscriberOrigin(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, u string) {
		nc, _ := connect(t, u)
		host, port := serverOf(t, u)
		n := newNames()
		for _, c := range []struct{ subject, queue string }{{n.subject + ".*", "workers"}, {n.subject + "-plain", ""}} {
			obs := &fakeTracer{}
			sub, err := dedupnats.NewSubscriber(nc, c.subject, c.queue, originReceiver(t, obs), &dedupnats.Options{DropPoison: true})
			require.NoError(t, err)
			require.NoError(t, sub.Start(t.Context()))
			stopAtCleanup(t, sub)
			subject := c.subject
			if c.queue != "" {
				subject = n.subject + ".42"
			}
			require.NoError(t, nc.Publish(subject, orderJSON(t, Order{ID: "o-1"})))
			events := obs.waitEvents(t, 1)
			require.Equal(t, map[string]string{subject: c.subject}, templateBySubject(t, events, host, port, c.queue))
		}
	})
}

// TestServerAfterReconnect: once the connection reconnected to another
// server, deliveries name that one.
func TestServerAfterReconnect(t *testing.T) {
	t.Parallel()
	first, second := plainServer(t), plainServer(t)
	reconnected := make(chan struct{}, 1)
	nc, err := natsgo.Connect(first.ClientURL()+","+second.ClientURL(), natsgo.DontRandomize(),
		natsgo.ReconnectWait(10*time.Millisecond), natsgo.ReconnectJitter(0, 0),
		natsgo.ReconnectHandler(func(*natsgo.Conn) { reconnected <- struct{}{} }))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	obs := &fakeTracer{}
	n := newNames()
	sub, err := dedupnats.NewSubscriber(nc, n.subject, "", originReceiver(t, obs), &dedupnats.Options{DropPoison: true})
	require.NoError(t, err)
	require.NoError(t, sub.Start(t.Context()))
	stopAtCleanup(t, sub)

	require.NoError(t, nc.Publish(n.subject, orderJSON(t, Order{ID: "o-1"})))
	obs.waitEvents(t, 1)
	first.Shutdown()
	testenv.Recv(t, reconnected, "the reconnect to the second server")
	require.NoError(t, nc.Publish(n.subject, orderJSON(t, Order{ID: "o-2"})))
	events := obs.waitEvents(t, 2)

	for i, srv := range []*server.Server{first, second} {
		host, port := serverOf(t, srv.ClientURL())
		require.Equal(t, host, events[i].ServerAddress, "delivery %d", i)
		require.Equal(t, port, events[i].ServerPort, "delivery %d", i)
	}
	require.NotEqual(t, events[0].ServerPort, events[1].ServerPort)
}

// plainServer starts a nats-server without JetStream on a free port,
// stopped when the test ends.
func plainServer(t *testing.T) *server.Server {
	t.Helper()
	return startServer(t, &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
}
