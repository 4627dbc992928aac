package dedupamqp_test

import (
	"context"
	"net"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/memstore"
)

// TestOrigin: a Consumer's deliveries name the server: the host and port
// of its url as given (a name, "localhost") when it dials the url itself,
// else the address its connection reached; no consumer group (the
// conventions give RabbitMQ none); and Options.DestinationTemplate, none
// without it.
func TestOrigin(t *testing.T) {
	t.Parallel()
	uri, err := amqp.ParseURI(testenv.RabbitMQ.Addr(t))
	require.NoError(t, err)
	if uri.Host == "127.0.0.1" {
		uri.Host = "localhost" // a name, which the url path keeps and the connection's address does not
	}
	url := uri.String()

	run := func(t *testing.T, url string, opts dedupamqp.Options) delivery.Event {
		t.Helper()
		top := declare(t, url, dedupamqp.Topology{})
		var seen events
		store, err := memstore.New(nil)
		require.NoError(t, err)
		rcv, err := dedup.NewReceiver(store, func(m *dedup.Message[Order]) (string, error) { return m.Body.ID, nil },
			func(ctx context.Context, m *dedup.Message[Order]) (struct{}, error) { return struct{}{}, ctx.Err() },
			observed(fastConfig("origin"), &seen))
		require.NoError(t, err)
		o := top.Options()
		o.DestinationTemplate = opts.DestinationTemplate
		o.Dial = opts.Dial
		c, err := dedupamqp.NewConsumer(url, top.Queue, rcv, o)
		require.NoError(t, err)
		require.NoError(t, c.Start(t.Context()))
		stopAtCleanup(t, c)
		publishAll(t, dial(t, url), top.Queue, []amqp.Publishing{{MessageId: "m-1", Body: orderJSON(t, Order{ID: "o-1"})}})
		eventually(t, "the delivery's event", func() bool { return seen.count() == 1 })
		e := seen.snapshot()[0]
		require.Equal(t, top.Queue, e.Source)
		require.Empty(t, e.ConsumerGroup)
		require.Equal(t, uri.Port, e.ServerPort)
		return e
	}

	t.Run("url", func(t *testing.T) {
		t.Parallel()
		e := run(t, url, dedupamqp.Options{})
		require.Equal(t, uri.Host, e.ServerAddress)
		require.Empty(t, e.DestinationTemplate)
	})
	t.Run("dial", func(t *testing.T) {
		t.Parallel()
		e := run(t, url, dedupamqp.Options{Dial: dedupamqp.DialURL(url), DestinationTemplate: "tenant.{id}.orders"})
		require.NotNil(t, net.ParseIP(e.ServerAddress), "the connection's remote address: %q", e.ServerAddress)
		require.Equal(t, "tenant.{id}.orders", e.DestinationTemplate)
	})
}

// observed returns cfg with obs as its Observer.
func observed(cfg *dedup.Config, obs delivery.Observer) *dedup.Config {
	cfg.Observer = obs
	return cfg
}
