package dedupredisstream_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dedup-go/dedup"
	dedupredisstream "github.com/dedup-go/dedup/adapters/redisstream"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store/memstore"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	goleak.VerifyTestMain(m)
}

// Order is the body of the tests' entries.
type Order struct {
	ID    string `json:"id"`
	Cents int    `json:"cents"`
}

// Receipt is the tests' handlers' result.
type Receipt struct {
	OrderID string `json:"order_id"`
}

// waitFor bounds every wait of the tests.
const waitFor = 30 * time.Second

// streams returns a stream and a dead-letter stream of the test's own on
// the shared Redis, deleted when the test ends.
func streams(t *testing.T) (*redis.Client, string, string) {
	t.Helper()
	c := redistest.Client(t)
	p := redistest.Prefix(t, c)
	return c, p + "orders", p + "orders.dlq"
}

// fastConfig is a receiver's configuration for tests: short leases and
// backoff.
func fastConfig(ns string) *dedup.Config {
	return &dedup.Config{
		Namespace: ns, Lease: 2 * time.Second, MaxAttempts: 3, StoreRetryDelay: 100 * time.Millisecond,
		Backoff: dedup.BackoffFunc(func(int) time.Duration { return 50 * time.Millisecond }),
	}
}

// newReceiver is a receiver over memstore, keyed on the entry's message
// id.
func newReceiver(t testing.TB, h dedup.Handler[*dedup.Message[Order], Receipt], cfg *dedup.Config) *dedup.Receiver[*dedup.Message[Order], Receipt] {
	t.Helper()
	st, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(st, idstrategy.MessageID[Order](), h, cfg)
	require.NoError(t, err)
	return rcv
}

// start starts c and stops it when the test ends.
func start[T, R any](t testing.TB, c *dedupredisstream.Consumer[T, R]) {
	t.Helper()
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		_ = c.Stop(ctx)
	})
}

// add adds an entry with the message id and body.
func add(t testing.TB, c redis.UniversalClient, stream, id string, body string) string {
	t.Helper()
	p, err := dedupredisstream.NewProducer(c, stream, nil)
	require.NoError(t, err)
	eid, _, err := p.Add(context.Background(), id, []byte(body), nil)
	require.NoError(t, err)
	return eid
}

// eventually waits until cond holds, checking every 10ms, at most waitFor.
func eventually(t testing.TB, cond func() bool, what string) {
	t.Helper()
	require.Eventually(t, cond, waitFor, 10*time.Millisecond, what)
}
