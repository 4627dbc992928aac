package dedupamqp_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	// The godoc examples talk to the shared RabbitMQ and cannot skip: when
	// it is unreachable (and not required), skip the package as the tests
	// would skip one by one.
	if !reachable(rabbitURL()) && !testenv.Required() {
		fmt.Printf("skipping: RabbitMQ is not reachable at %s: start it with %s, or point %s at one\n",
			rabbitURL(), testenv.RabbitMQ.Start, testenv.RabbitMQ.Env)
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// rabbitURL is where the shared RabbitMQ is, without checking.
func rabbitURL() string {
	if v := os.Getenv(testenv.RabbitMQ.Env); v != "" {
		return v
	}
	return testenv.RabbitMQ.Default
}

func reachable(url string) bool {
	u, err := amqp.ParseURI(url)
	if err != nil {
		return false
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort(u.Host, fmt.Sprint(u.Port)), 2*time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// suffix returns a random name part, so tests on a shared broker never see
// each other's queues.
func suffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// dial opens a connection closed at the end of the test.
func dial(t testing.TB, url string) *amqp.Connection {
	t.Helper()
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// channel opens a channel on conn, closed at the end of the test.
func channel(t testing.TB, conn *amqp.Connection) *amqp.Channel {
	t.Helper()
	ch, err := conn.Channel()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ch.Close() })
	return ch
}

// declare declares a topology under a unique queue name and deletes all of
// it when the test ends.
func declare(t testing.TB, url string, top dedupamqp.Topology) dedupamqp.Topology {
	t.Helper()
	if top.Queue == "" {
		top.Queue = "dedupt." + suffix() + ".orders"
	}
	if top.DeadLetterExchange == "" {
		top.DeadLetterExchange = top.Queue + ".dlx"
	}
	if top.DeadLetterQueue == "" {
		top.DeadLetterQueue = top.Queue + ".dlq"
	}
	conn := dial(t, url)
	require.NoError(t, top.Declare(t.Context(), channel(t, conn)))
	t.Cleanup(func() {
		conn, err := amqp.Dial(url)
		if err != nil {
			t.Logf("clean up %s: %v", top.Queue, err)
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Logf("clean up %s: %v", top.Queue, err)
			return
		}
		names := []string{top.Queue, top.DeadLetterQueue}
		for _, d := range top.RetryTiers {
			names = append(names, adapter.RetryName(top.Queue, d))
		}
		for _, q := range names {
			if _, err := ch.QueueDelete(q, false, false, false); err != nil {
				t.Logf("delete queue %s: %v", q, err)
				if ch, err = conn.Channel(); err != nil {
					return
				}
			}
		}
		if err := ch.ExchangeDelete(top.DeadLetterExchange, false, false); err != nil {
			t.Logf("delete exchange %s: %v", top.DeadLetterExchange, err)
		}
	})
	return top
}

// Order is the test message.
type Order struct {
	ID    string `json:"id,omitempty"`
	Cents int    `json:"cents"`
}

func orderJSON(t testing.TB, o Order) []byte {
	t.Helper()
	b, err := json.Marshal(o)
	require.NoError(t, err)
	return b
}

// publishAll publishes msgs to the default exchange with routing key queue,
// persistent, with confirms, and waits for every confirm.
func publishAll(t testing.TB, conn *amqp.Connection, queue string, msgs []amqp.Publishing) {
	t.Helper()
	ch := channel(t, conn)
	require.NoError(t, ch.Confirm(false))
	ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	pending := make([]*amqp.DeferredConfirmation, 0, len(msgs))
	for _, m := range msgs {
		if m.DeliveryMode == 0 {
			m.DeliveryMode = amqp.Persistent
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, m)
		require.NoError(t, err)
		pending = append(pending, dc)
	}
	for _, dc := range pending {
		ok, err := dc.WaitContext(ctx)
		require.NoError(t, err)
		require.True(t, ok, "publish nacked")
	}
}

// getAll reads want messages from queue (basic.get, acknowledged), waiting
// for them within the bounded wait, and returns them.
func getAll(t testing.TB, conn *amqp.Connection, queue string, want int) []amqp.Delivery {
	t.Helper()
	ch := channel(t, conn)
	var out []amqp.Delivery
	deadline := time.Now().Add(testenv.WaitTimeout)
	for len(out) < want {
		d, ok, err := ch.Get(queue, true)
		require.NoError(t, err)
		if ok {
			out = append(out, d)
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d messages arrived within %v", queue, len(out), want, testenv.WaitTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return out
}

// depth is the number of ready messages in queue.
func depth(t testing.TB, conn *amqp.Connection, queue string) int {
	t.Helper()
	ch := channel(t, conn)
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(t, err)
	return q.Messages
}

// eventually polls cond every 20ms, failing t when it does not hold within
// testenv.WaitTimeout (or within, when longer).
func eventually(t testing.TB, what string, cond func() bool, within ...time.Duration) {
	t.Helper()
	limit := testenv.WaitTimeout
	if len(within) > 0 {
		limit = max(limit, within[0])
	}
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fastConfig keeps retries fast in tests, and the logs quiet.
func fastConfig(ns string) *dedup.Config {
	return &dedup.Config{
		Namespace:       ns,
		Lease:           2 * time.Second,
		Backoff:         dedup.BackoffFunc(func(int) time.Duration { return 20 * time.Millisecond }),
		StoreRetryDelay: 100 * time.Millisecond,
		Logger:          slog.New(slog.DiscardHandler),
	}
}

// events records every event the Observer hears of.
type events struct {
	mu  sync.Mutex
	all []delivery.Event
}

func (e *events) Observe(_ context.Context, ev delivery.Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
}

func (e *events) reasons() map[delivery.Reason]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[delivery.Reason]int{}
	for _, ev := range e.all {
		out[ev.Decision.Reason]++
	}
	return out
}

func (e *events) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.all)
}

func (e *events) snapshot() []delivery.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]delivery.Event(nil), e.all...)
}

// logs records every log record's message and attributes, as text.
type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) handler() slog.Handler { return &logHandler{l: l} }

func (l *logs) contains(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

type logHandler struct {
	l     *logs
	attrs []slog.Attr
}

func (h *logHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *logHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	for _, a := range h.attrs {
		b.WriteString(" " + a.String())
	}
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	h.l.mu.Lock()
	h.l.lines = append(h.l.lines, b.String())
	h.l.mu.Unlock()
	return nil
}
func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &logHandler{l: h.l, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}
func (h *logHandler) WithGroup(string) slog.Handler { return h }

// stopAtCleanup stops c at the end of the test and waits for it.
func stopAtCleanup(t testing.TB, c interface {
	Stop(context.Context) error
	Stopped() <-chan struct{}
}) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
		defer cancel()
		if err := c.Stop(ctx); err != nil && !errors.Is(err, dedupamqp.ErrNotStarted) {
			t.Errorf("stop: %v", err)
		}
		testenv.Recv(t, c.Stopped(), "the consumer to stop")
	})
}

func slogNew(h slog.Handler) *slog.Logger { return slog.New(h) }
