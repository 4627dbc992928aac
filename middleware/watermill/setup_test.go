package dedupwatermill_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/internal/testenv"
	dedupwatermill "github.com/dedup-go/dedup/middleware/watermill"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	goleak.VerifyTestMain(m,
		// Watermill's in-memory key repository (the Deduplicator's, run
		// beside ours) starts a cleaner nobody can stop.
		goleak.IgnoreAnyFunction("github.com/ThreeDotsLabs/watermill/message/router/middleware.(*mapExpiringKeyRepository).cleanOutLoop"),
	)
}

// rabbitURL is where the shared RabbitMQ is; the test skips (or fails
// under DEDUP_TEST_REQUIRE=1) when it cannot be reached.
func rabbitURL(t testing.TB) string {
	t.Helper()
	return testenv.RabbitMQ.Addr(t)
}

// suffix returns a random name part, so tests on a shared broker never see
// each other's queues.
func suffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// topic returns a queue name of the test's own, deleted at its end.
func topic(t testing.TB, url, what string) string {
	t.Helper()
	name := "dedupwatermill-test." + what + "." + suffix()
	t.Cleanup(func() {
		conn, err := amqp.Dial(url)
		if err != nil {
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		_, _ = ch.QueueDelete(name, false, false, false)
	})
	return name
}

// amqpConfig is watermill-amqp's durable queue config (one queue per
// topic, named as the topic), with prefetch.
func amqpConfig(url string, prefetch int) wamqp.Config {
	cfg := wamqp.NewDurableQueueConfig(url)
	cfg.Consume.Qos.PrefetchCount = prefetch
	return cfg
}

// subscriber returns an AMQP subscriber closed at the end of the test.
func subscriber(t testing.TB, url string) message.Subscriber {
	t.Helper()
	sub, err := wamqp.NewSubscriber(amqpConfig(url, 4), watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

// publisher returns an AMQP publisher closed at the end of the test.
func publisher(t testing.TB, url string) message.Publisher {
	t.Helper()
	pub, err := wamqp.NewPublisher(amqpConfig(url, 0), watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// startRouter runs r until the end of the test, and waits for it to run.
func startRouter(t testing.TB, r *message.Router) {
	t.Helper()
	ran := make(chan error, 1)
	go func() { ran <- r.Run(context.Background()) }()
	testenv.Recv(t, r.Running(), "the router to run")
	t.Cleanup(func() {
		_ = r.Close()
		if err := testenv.Recv(t, ran, "the router to stop"); err != nil {
			t.Errorf("router: %v", err)
		}
	})
}

func newRouter(t testing.TB) *message.Router {
	t.Helper()
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: testenv.WaitTimeout}, watermill.NopLogger{})
	require.NoError(t, err)
	return r
}

// newMiddleware returns a Middleware over st with quick retries.
func newMiddleware(t testing.TB, st store.Store, ns string, opts *dedupwatermill.Options) *dedupwatermill.Middleware {
	t.Helper()
	o := dedupwatermill.Options{}
	if opts != nil {
		o = *opts
	}
	cfg := dedup.Config{}
	if o.Config != nil {
		cfg = *o.Config
	}
	cfg.Namespace = ns
	if cfg.Backoff == nil {
		cfg.Backoff = dedup.BackoffFunc(func(int) time.Duration { return 20 * time.Millisecond })
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	o.Config = &cfg
	mw, err := dedupwatermill.New(st, &o)
	require.NoError(t, err)
	return mw
}

func newMemstore(t testing.TB) store.Store {
	t.Helper()
	st, err := memstore.New(nil)
	require.NoError(t, err)
	return st
}

// counts counts by key, and signals when a total is reached.
type counts struct {
	mu      sync.Mutex
	n       map[string]int
	total   int
	want    int
	reached chan struct{}
}

func newCounts(want int) *counts {
	return &counts{n: map[string]int{}, want: want, reached: make(chan struct{})}
}

func (c *counts) add(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[key]++
	c.total++
	if c.total == c.want {
		close(c.reached)
	}
}

func (c *counts) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

func (c *counts) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// await waits for the wanted total.
func (c *counts) await(t testing.TB, what string) {
	t.Helper()
	testenv.Recv(t, c.reached, what)
}

// publishN publishes n messages to topic, each with a fresh UUID and its
// index in the metadata, and returns their UUIDs.
func publishN(t testing.TB, pub message.Publisher, topic string, n int, copies int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		ids[i] = watermill.NewUUID()
		for range copies {
			m := message.NewMessage(ids[i], []byte(fmt.Sprintf(`{"n":%d}`, i)))
			m.Metadata.Set("n", fmt.Sprint(i))
			require.NoError(t, pub.Publish(topic, m))
		}
	}
	return ids
}

// reachable reports whether url's host answers, for the child.
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
