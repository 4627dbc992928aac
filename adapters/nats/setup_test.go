package dedupnats_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/adaptertest"
	"github.com/dedup-go/dedup/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// embedded starts a current nats-server with JetStream in a temporary
// directory, on a free port, and stops it when the test ends.
func embedded(t testing.TB) string {
	t.Helper()
	return startServer(t, &server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	}).ClientURL()
}

// startServer starts an embedded nats-server with opts and stops it when
// the test ends.
func startServer(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	srv, err := server.NewServer(opts)
	require.NoError(t, err)
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		t.Fatal("embedded nats-server did not start")
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	return srv
}

// forEachServer runs fn against the shared NATS server (Debian's 2.9 on
// 4222, or DEDUP_TEST_NATS) and against an embedded current one.
func forEachServer(t *testing.T, fn func(t *testing.T, url string)) {
	t.Run("shared", func(t *testing.T) {
		t.Parallel()
		fn(t, testenv.NATS.Addr(t))
	})
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		fn(t, embedded(t))
	})
}

// connect opens a connection closed at the end of the test.
func connect(t testing.TB, url string) (*natsgo.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := natsgo.Connect(url, natsgo.MaxReconnects(0))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	// The tests publish thousands of messages asynchronously and then wait
	// for them all; on a busy machine the default of 4,000 pending
	// publishes stalls ("too many outstanding async published messages").
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1<<16))
	require.NoError(t, err)
	return nc, js
}

// suffix returns a random name part, so tests on a shared server never see
// each other's streams.
func suffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return strings.ToUpper(hex.EncodeToString(b))
}

// names of one test's stream, subjects and consumer.
type names struct {
	stream, subject, dlqStream, dlq, consumer string
}

func newNames() names {
	s := suffix()
	return names{
		stream: "DEDUPT_" + s, subject: "dedupt." + s + ".orders",
		dlqStream: "DEDUPT_" + s + "_DLQ", dlq: "dedupt." + s + ".dlq",
		consumer: "worker_" + s,
	}
}

// streams creates the test's stream and dead-letter stream, deleted when
// the test ends.
func streams(t testing.TB, js jetstream.JetStream, n names) {
	t.Helper()
	ctx := context.Background()
	for name, subj := range map[string]string{n.stream: n.subject, n.dlqStream: n.dlq} {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subj}, Storage: jetstream.MemoryStorage})
		require.NoError(t, err)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) && !errors.Is(err, natsgo.ErrConnectionClosed) {
				t.Logf("delete stream %s: %v", name, err)
			}
		})
	}
}

// consumer creates a durable pull consumer on the test's stream.
func consumer(t testing.TB, js jetstream.JetStream, n names, cfg jetstream.ConsumerConfig) jetstream.Consumer {
	t.Helper()
	cfg.Durable = n.consumer
	cfg.AckPolicy = jetstream.AckExplicitPolicy
	c, err := js.CreateOrUpdateConsumer(context.Background(), n.stream, cfg)
	require.NoError(t, err)
	return c
}

// Order is the test message.
type Order struct {
	ID    string `json:"id,omitempty"`
	Cents int    `json:"cents"`
}

// Receipt is the handler's result.
type Receipt struct {
	OrderID string `json:"order_id"`
	Charge  int64  `json:"charge"`
}

func orderJSON(t testing.TB, o Order) []byte {
	t.Helper()
	b, err := json.Marshal(o)
	require.NoError(t, err)
	return b
}

// effects counts side effects per order id, and in all.
type effects struct {
	deduptest.Effects
	total atomic.Int64
}

func newEffects() *effects { return &effects{} }

func (e *effects) add(id string) int64 {
	e.Record(id)
	return e.total.Add(1)
}

// settled waits until the consumer has nothing pending or unacknowledged.
func settled(t testing.TB, c jetstream.Consumer, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		info, err := c.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}, within, 50*time.Millisecond, "the consumer still has unsettled messages")
}

// deadLetters reads every message of the dead-letter stream.
func deadLetters(t testing.TB, js jetstream.JetStream, n names, want int, within time.Duration) []jetstream.Msg {
	t.Helper()
	ctx := context.Background()
	require.Eventually(t, func() bool {
		s, err := js.Stream(ctx, n.dlqStream)
		if err != nil {
			return false
		}
		info, err := s.Info(ctx)
		return err == nil && info.State.Msgs >= uint64(want)
	}, within, 50*time.Millisecond, "dead letters did not arrive")
	c, err := js.OrderedConsumer(ctx, n.dlqStream, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	batch, err := c.FetchNoWait(want + 10)
	require.NoError(t, err)
	var out []jetstream.Msg
	for m := range batch.Messages() {
		out = append(out, m)
	}
	require.NoError(t, batch.Error())
	return out
}

// fastConfig keeps retries fast in tests, and the logs quiet.
func fastConfig(ns string) *dedup.Config {
	return &dedup.Config{
		Namespace:       ns,
		Lease:           1500 * time.Millisecond,
		Backoff:         dedup.BackoffFunc(func(int) time.Duration { return 50 * time.Millisecond }),
		StoreRetryDelay: 200 * time.Millisecond,
		Logger:          slog.New(slog.DiscardHandler),
	}
}

// observed returns cfg with obs as its Observer.
func observed(cfg *dedup.Config, obs delivery.Observer) *dedup.Config {
	cfg.Observer = obs
	return cfg
}

// sendUntilDone sends v on ch for an observer or handler, giving up when
// the test ends, so that a surplus event (a redelivery the test did not
// count on) never leaves the adapter's worker blocked.
func sendUntilDone[V any](t testing.TB, ch chan<- V, v V) {
	select {
	case ch <- v:
	case <-t.Context().Done():
	}
}

// Shared with the other adapters' tests.
var (
	onSettled     = adaptertest.OnSettled
	stopAtCleanup = adaptertest.StopAtCleanup
)
