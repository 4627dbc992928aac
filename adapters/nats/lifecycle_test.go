package dedupnats_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/internal/testenv"
)

// runner is a Consumer or a Subscriber.
type runner interface {
	Start(context.Context) error
	Stop(context.Context) error
	Stopped() <-chan struct{}
	Err() error
}

// running is a consumer or subscriber started on a context of its own that
// has handled one order, with what the caller gave it.
type running struct {
	r      runner
	cancel context.CancelCauseFunc // ends Start's context
	logs   *syncBuffer
	nc     *natsgo.Conn       // the caller's connection
	cons   jetstream.Consumer // the caller's JetStream consumer (nil for a subscriber)
	what   string             // "consumer" or "subscriber", as the error log names it
	fx     *effects
}

// startRunning starts a consumer or a subscriber on a connection of the
// test's own, with a Start context the test ends itself, and waits until
// it has handled one order.
func startRunning(t *testing.T, url, kind string) running {
	t.Helper()
	nc, js := connect(t, url)
	n := newNames()
	fx := newEffects()
	logs := &syncBuffer{}
	rcv := okReceiver(t, fx, fastConfig("lifecycle"))
	opts := &dedupnats.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))}
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	rn := running{cancel: cancel, logs: logs, nc: nc, what: kind, fx: fx}
	var publish func()
	switch kind {
	case "consumer":
		streams(t, js, n)
		rn.cons = consumer(t, js, n, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 5})
		opts.DeadLetterSubject = n.dlq
		c, err := dedupnats.NewConsumer(js, rn.cons, rcv, opts)
		require.NoError(t, err)
		rn.r = c
		publish = func() {
			_, err := js.Publish(t.Context(), n.subject, orderJSON(t, Order{ID: "o-1"}))
			require.NoError(t, err)
		}
	default:
		opts.DropPoison = true
		s, err := dedupnats.NewSubscriber(nc, n.subject, "", rcv, opts)
		require.NoError(t, err)
		rn.r = s
		publish = func() { require.NoError(t, nc.Publish(n.subject, orderJSON(t, Order{ID: "o-1"}))) }
	}
	require.NoError(t, rn.r.Start(ctx))
	stopAtCleanup(t, rn.r)
	publish()
	require.Eventually(t, func() bool { return fx.Len() == 1 }, 10*time.Second, 10*time.Millisecond, "the order was not handled")
	return rn
}

// TestStartContextEndIsUnasked: Start's context ending without Stop (here
// cancelled with a cause, as a context.WithTimeout ends with its deadline)
// is a hard stop nobody asked for: the consumer and the subscriber stop,
// log it at error level, and Err matches ErrStoppedUnasked and
// context.Cause of Start's context. Once Stop was asked for, the end of
// Start's context is no error.
func TestStartContextEndIsUnasked(t *testing.T) {
	t.Parallel()
	errShift := errors.New("shift over")
	forEachServer(t, func(t *testing.T, url string) {
		for _, kind := range []string{"consumer", "subscriber"} {
			t.Run(kind+"/context ends", func(t *testing.T) {
				rn := startRunning(t, url, kind)
				rn.cancel(errShift)
				testenv.Recv(t, rn.r.Stopped(), "the "+kind+" to stop")
				require.ErrorIs(t, rn.r.Err(), dedupnats.ErrStoppedUnasked)
				require.ErrorIs(t, rn.r.Err(), errShift)
				require.Contains(t, rn.logs.String(), `level=ERROR msg="dedupnats: `+kind+` stopped without Stop"`)
			})
			t.Run(kind+"/context ends after Stop", func(t *testing.T) {
				rn := startRunning(t, url, kind)
				stopCtx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
				defer cancel()
				require.NoError(t, rn.r.Stop(stopCtx))
				rn.cancel(errShift)
				testenv.Recv(t, rn.r.Stopped(), "the "+kind+" to stop")
				require.NoError(t, rn.r.Err())
				require.NotContains(t, rn.logs.String(), "level=ERROR")
			})
		}
	})
}

// TestStopLeavesWhatTheCallerGave: the adapter closes only what it made
// itself (its subscription, its fetch). After Stop, and after a hard stop,
// the caller's connection is open and works, and the caller's JetStream
// consumer still exists.
func TestStopLeavesWhatTheCallerGave(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		for _, kind := range []string{"consumer", "subscriber"} {
			for _, how := range []string{"Stop", "hard stop"} {
				t.Run(kind+"/"+how, func(t *testing.T) {
					rn := startRunning(t, url, kind)
					if how == "Stop" {
						stopCtx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
						defer cancel()
						require.NoError(t, rn.r.Stop(stopCtx))
					} else {
						rn.cancel(errors.New("hard stop"))
					}
					testenv.Recv(t, rn.r.Stopped(), "the "+kind+" to stop")
					require.False(t, rn.nc.IsClosed(), "the adapter closed the caller's connection")
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					require.NoError(t, rn.nc.FlushWithContext(ctx), "the caller's connection no longer works")
					if rn.cons != nil {
						_, err := rn.cons.Info(ctx)
						require.NoError(t, err, "the caller's JetStream consumer is gone")
					}
				})
			}
		}
	})
}

// TestNilOptionsNeedADeadLetterSubject: nil Options are all defaults, but
// DeadLetterSubject has none: NewConsumer and NewSubscriber refuse nil
// Options (and Options without DeadLetterSubject or DropPoison) with an
// error matching ErrNoDeadLetter and dedup.ErrInvalidConfig that names
// the field, never a panic; with DropPoison, the rest defaults.
func TestNilOptionsNeedADeadLetterSubject(t *testing.T) {
	t.Parallel()
	nc, js := connect(t, embedded(t))
	n := newNames()
	streams(t, js, n)
	cons := consumer(t, js, n, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 3})
	rcv := okReceiver(t, newEffects(), fastConfig("nilopts"))
	for name, fn := range map[string]func(*dedupnats.Options) error{
		"consumer": func(o *dedupnats.Options) error {
			_, err := dedupnats.NewConsumer(js, cons, rcv, o)
			return err
		},
		"subscriber": func(o *dedupnats.Options) error {
			_, err := dedupnats.NewSubscriber(nc, n.subject, "", rcv, o)
			return err
		},
	} {
		for _, o := range []*dedupnats.Options{nil, {Concurrency: 2}} {
			err := fn(o)
			require.ErrorIs(t, err, dedupnats.ErrNoDeadLetter, name)
			require.ErrorIs(t, err, dedup.ErrInvalidConfig, name)
			require.ErrorContains(t, err, "DeadLetterSubject", name)
		}
		require.NoError(t, fn(&dedupnats.Options{DropPoison: true}), name)
	}
}
