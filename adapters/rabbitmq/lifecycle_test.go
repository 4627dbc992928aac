package dedupamqp_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/internal/testenv"
)

// TestStartContextEndIsAnError: a Start context that ends without Stop
// stops the consumer (a hard stop), and that is no silent stop: it is
// logged at error level and Err matches ErrStoppedUnasked and the
// context's cause. A Stop that came first leaves Err nil and logs no error,
// also when Start's context ends afterwards.
func TestStartContextEndIsAnError(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	errShutdown := errors.New("the service is shutting down")
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) (context.Context, func())
		stop  bool
		cause error
	}{
		{"cancelled with a cause", func(t *testing.T) (context.Context, func()) {
			ctx, cancel := context.WithCancelCause(t.Context())
			return ctx, func() { cancel(errShutdown) }
		}, false, errShutdown},
		{"deadline", func(t *testing.T) (context.Context, func()) {
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			t.Cleanup(cancel)
			return ctx, func() {} // it ends on its own
		}, false, context.DeadlineExceeded},
		{"Stop first", func(t *testing.T) (context.Context, func()) {
			ctx, cancel := context.WithCancel(t.Context())
			return ctx, cancel
		}, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			top := declare(t, url, dedupamqp.Topology{})
			var l logs
			opts := top.Options()
			opts.Logger = slog.New(l.handler())
			c, err := dedupamqp.NewConsumer(url, top.Queue, nopReceiver(t, fastConfig("unasked")), opts)
			require.NoError(t, err)
			ctx, end := tc.start(t)
			require.NoError(t, c.Start(ctx))
			stopAtCleanup(t, c)
			require.NoError(t, c.Err(), "running")
			if tc.stop {
				stopCtx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
				defer cancel()
				require.NoError(t, c.Stop(stopCtx))
				end()
				require.NoError(t, c.Err())
				require.Empty(t, l.contains("ERROR"))
				return
			}
			end()
			testenv.Recv(t, c.Stopped(), "the consumer to stop")
			require.ErrorIs(t, c.Err(), dedupamqp.ErrStoppedUnasked)
			require.ErrorIs(t, c.Err(), tc.cause)
			require.EqualError(t, dedupamqp.ErrStoppedUnasked, "dedupamqp: stopped without Stop")
			errs := l.contains("ERROR dedupamqp: consumer stopped without Stop")
			require.Len(t, errs, 1)
			require.Contains(t, errs[0], tc.cause.Error())
		})
	}
}

// TestBrokerVersionLogged: Start reads the broker's version from the
// connection's server properties and logs it, and, for a quorum queue (or
// one of unknown type), which returns it counts towards its
// x-delivery-limit there: Nack and Reject before 4.0, Reject only since. A
// classic queue has no delivery limit: its line says nothing of one.
func TestBrokerVersionLogged(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	version, _ := dial(t, url).Properties["version"].(string)
	require.NotEmpty(t, version)
	nackCounts := !strings.HasPrefix(version, "4.") // the local broker is 3.10; a 4.x counts only Reject
	for _, tc := range []struct {
		name  string
		typ   dedupamqp.QueueType
		known bool // the options say the type
		rule  bool
	}{
		{"Classic", dedupamqp.Classic, true, false},
		{"Quorum", dedupamqp.Quorum, true, true},
		{"Unknown", dedupamqp.Quorum, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			top := declare(t, url, dedupamqp.Topology{Type: tc.typ})
			var l logs
			opts := top.Options()
			if !tc.known {
				opts.QueueType = ""
			}
			opts.Logger = slog.New(l.handler())
			c, err := dedupamqp.NewConsumer(url, top.Queue, nopReceiver(t, fastConfig("version")), opts)
			require.NoError(t, err)
			require.NoError(t, c.Start(t.Context()))
			stopAtCleanup(t, c)
			lines := l.contains("INFO dedupamqp: connected to RabbitMQ " + version)
			require.Len(t, lines, 1)
			require.Contains(t, lines[0], "version="+version)
			if !tc.rule {
				require.NotContains(t, lines[0], "delivery-limit", "a classic queue has no delivery limit")
				require.NotContains(t, lines[0], "delivery_limit")
				return
			}
			require.Contains(t, lines[0], fmt.Sprintf("nack_counts_towards_delivery_limit=%t", nackCounts))
		})
	}
}

// TestOwnership: what the caller passes in stays the caller's. A Publisher
// closes its own channel, never the connection it was given; Declare
// leaves the caller's channel open; a Consumer closes the connections it
// dialled itself once it stops.
func TestOwnership(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	conn := dial(t, url)
	ch := channel(t, conn)
	top := dedupamqp.Topology{Queue: "dedupt." + suffix() + ".own"}
	top = declare(t, url, top)
	require.NoError(t, top.Declare(t.Context(), ch))
	require.False(t, ch.IsClosed(), "Declare closed the caller's channel")

	pub, err := dedupamqp.NewPublisher(conn, nil)
	require.NoError(t, err)
	_, err = pub.Publish(t.Context(), "", top.Queue, amqp.Publishing{Body: orderJSON(t, Order{ID: "o-1"})})
	require.NoError(t, err)
	require.NoError(t, pub.Close(t.Context()))
	require.False(t, conn.IsClosed(), "Publisher.Close closed the caller's connection")
	_, err = conn.Channel()
	require.NoError(t, err, "the caller's connection is still usable")

	var mu sync.Mutex
	var dialled []*amqp.Connection
	opts := top.Options()
	opts.Dial = func(ctx context.Context) (*amqp.Connection, error) {
		c, err := dedupamqp.DialURL(url)(ctx)
		if err == nil {
			mu.Lock()
			dialled = append(dialled, c)
			mu.Unlock()
		}
		return c, err
	}
	c, err := dedupamqp.NewConsumer("", top.Queue, nopReceiver(t, fastConfig("own")), opts)
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)
	stopCtx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	require.NoError(t, c.Stop(stopCtx))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, dialled, 2, "one connection to consume, one to publish")
	for _, dc := range dialled {
		require.True(t, dc.IsClosed(), "the consumer left a connection of its own open")
	}
	require.False(t, conn.IsClosed())
}
