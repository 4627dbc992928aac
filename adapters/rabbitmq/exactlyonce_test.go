package dedupamqp_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/redisstore"
	"github.com/dedup-go/dedup/store/tieredstore"
)

// The second process of TestExactlyOnce is this test binary, started with
// childEnv set: TestMain runs childMain instead of the tests.
const (
	childEnv    = "DEDUP_AMQP_CHILD"
	childURL    = "DEDUP_AMQP_CHILD_URL"
	childQueue  = "DEDUP_AMQP_CHILD_QUEUE"
	childRedis  = "DEDUP_AMQP_CHILD_REDIS"
	childPrefix = "DEDUP_AMQP_CHILD_PREFIX"
	childTiers  = "DEDUP_AMQP_CHILD_TIERS"
)

// exactlyOnceOrders is how many orders each queue type gets. The issue asks
// for 5,000; see the README for the race-detector timing.
const exactlyOnceOrders = 5000

// sleepers run past the receiver's lease: only the heartbeat keeps another
// consumer from taking them over.
var sleepers = map[string]bool{"o-00007": true, "o-01234": true, "o-04321": true}

// world is what one process's consumers share: Redis (the store and the
// effects) and the handler.
type world struct {
	client *redis.Client
	prefix string
	lease  time.Duration
}

func (w world) effects() string     { return w.prefix + "effects" }
func (w world) failed() string      { return w.prefix + "failed" }
func (w world) sleeperRuns() string { return w.prefix + "sleeper-runs" }

// charge is the handler of every consumer in both processes: its effect is
// an HINCRBY in Redis, so the test counts effects across processes.
// About 10% of the orders fail once, transiently (remembered in Redis, so
// the retry may land in either process); the sleepers run past the lease.
func (w world) charge(ctx context.Context, m *dedup.Message[Order]) (string, error) {
	id := m.Body.ID
	if sleepers[id] {
		if err := w.client.HIncrBy(context.WithoutCancel(ctx), w.sleeperRuns(), id, 1).Err(); err != nil {
			return "", err
		}
		select {
		case <-time.After(w.lease + time.Second):
		case <-ctx.Done():
			return "", ctx.Err()
		}
	} else if h := fnv.New32a(); true {
		h.Write([]byte(id))
		if h.Sum32()%10 == 0 {
			first, err := w.client.HSetNX(ctx, w.failed(), id, 1).Result()
			if err != nil {
				return "", err
			}
			if first {
				return "", errors.New("payment gateway timeout")
			}
		}
	}
	if err := w.client.HIncrBy(context.WithoutCancel(ctx), w.effects(), id, 1).Err(); err != nil {
		return "", err
	}
	return "receipt-" + id, nil
}

// startConsumers starts n consumers of queue sharing one receiver over a
// tiered store in front of Redis, as one process of the service would.
func startConsumers(ctx context.Context, w world, url, queue string, tiers []time.Duration, n int, logger *slog.Logger) ([]*dedupamqp.Consumer[Order, string], error) {
	remote, err := redisstore.New(ctx, w.client, &redisstore.Options{Prefix: w.prefix + "rec:"})
	if err != nil {
		return nil, err
	}
	st, err := tieredstore.New(remote, nil)
	if err != nil {
		return nil, err
	}
	cfg := &dedup.Config{
		Namespace:       "billing",
		Lease:           w.lease,
		Backoff:         dedup.BackoffFunc(func(int) time.Duration { return 20 * time.Millisecond }),
		StoreRetryDelay: 100 * time.Millisecond,
		Logger:          logger,
	}
	rcv, err := dedup.NewReceiver(st, idstrategy.BodyField("id", func(o Order) string { return o.ID }), w.charge, cfg)
	if err != nil {
		return nil, err
	}
	var out []*dedupamqp.Consumer[Order, string]
	for range n {
		c, err := dedupamqp.NewConsumer(url, queue, rcv, &dedupamqp.Options{
			Concurrency: 8, DeadLetterExchange: queue + ".dlx", RetryTiers: tiers,
		})
		if err != nil {
			return nil, err
		}
		if err := c.Start(ctx); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func stopAll(ctx context.Context, cs []*dedupamqp.Consumer[Order, string]) error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Stop(ctx), c.Err())
	}
	return errors.Join(errs...)
}

// childMain is the second process: two consumers until its stdin closes.
func childMain() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "child:", err); return 1 }
	client := redis.NewClient(&redis.Options{Addr: os.Getenv(childRedis), ContextTimeoutEnabled: true})
	defer client.Close()
	var tiers []time.Duration
	for _, s := range strings.Fields(os.Getenv(childTiers)) {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fail(err)
		}
		tiers = append(tiers, d)
	}
	w := world{client: client, prefix: os.Getenv(childPrefix), lease: 2 * time.Second}
	ctx := context.Background()
	cs, err := startConsumers(ctx, w, os.Getenv(childURL), os.Getenv(childQueue), tiers, 2, slog.New(slog.DiscardHandler))
	if err != nil {
		return fail(err)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin) // the parent closes it to stop us
	stopCtx, cancel := context.WithTimeout(ctx, testenv.WaitTimeout)
	defer cancel()
	if err := stopAll(stopCtx, cs); err != nil {
		return fail(err)
	}
	fmt.Println("stopped")
	return 0
}

// TestExactlyOnce publishes 5,000 orders to a classic and to a quorum
// queue, 20% of them again under another message id (so only the order id
// in the body catches them), plus poison; four consumers in two processes
// share one Redis through tieredstore; handlers fail transiently at random,
// a few run past the lease, and retries in flight elsewhere go through the
// retry tiers. Every order must have its effect exactly once, none lost,
// and the poison must reach the dead-letter queue with its reason.
func TestExactlyOnce(t *testing.T) {
	t.Parallel()
	forEachQueueType(t, func(t *testing.T, typ dedupamqp.QueueType) {
		const orders, repeatEvery = exactlyOnceOrders, 5
		url := testenv.RabbitMQ.Addr(t)
		client := redistest.Client(t)
		prefix := redistest.Prefix(t, client)
		tiers := []time.Duration{500 * time.Millisecond, 2 * time.Second}
		top := declare(t, url, dedupamqp.Topology{Type: typ, RetryTiers: tiers})
		conn := dial(t, url)

		var msgs []amqp.Publishing
		for i := range orders {
			o := Order{ID: fmt.Sprintf("o-%05d", i), Cents: 100 + i}
			msgs = append(msgs, amqp.Publishing{MessageId: "m-" + o.ID, Body: orderJSON(t, o)})
			if i%repeatEvery == 0 {
				msgs = append(msgs, amqp.Publishing{MessageId: "m-" + o.ID + "-republished", Body: orderJSON(t, o)})
			}
		}
		poison := []amqp.Publishing{
			{MessageId: "p-1", Body: []byte(`{"id": "o-9`)}, {MessageId: "p-2", Body: []byte("not json")},
			{MessageId: "p-3", Body: []byte("{\"id\": \"\xc3\x28\"}")},
			{MessageId: "p-4", Body: []byte(`{"cents": 5}`)}, {MessageId: "p-5", Body: []byte(`{"id": "", "cents": 6}`)},
		}
		msgs = append(msgs, poison...)
		publishAll(t, conn, top.Queue, msgs)

		// The second process.
		var tierArgs []string
		for _, d := range tiers {
			tierArgs = append(tierArgs, d.String())
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=1", childURL+"="+url, childQueue+"="+top.Queue,
			childRedis+"="+client.Options().Addr, childPrefix+"="+prefix, childTiers+"="+strings.Join(tierArgs, " "))
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		var stderr syncBuffer
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		var childErr error
		exited := make(chan struct{})
		lines := make(chan string, 4)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
			childErr = cmd.Wait()
			close(exited)
		}()
		t.Cleanup(func() {
			_ = stdin.Close()
			select {
			case <-exited:
			case <-time.After(testenv.WaitTimeout):
				_ = cmd.Process.Kill()
				<-exited
			}
		})
		require.Equal(t, "ready", testenv.Recv(t, lines, "the second process to start"), stderr.String())

		w := world{client: client, prefix: prefix, lease: 2 * time.Second}
		cs, err := startConsumers(t.Context(), w, url, top.Queue, tiers, 2, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		for _, c := range cs {
			stopAtCleanup(t, c)
		}

		begin := time.Now()
		eventually(t, "every order charged", func() bool {
			n, err := client.HLen(t.Context(), w.effects()).Result()
			return err == nil && n == orders
		}, 3*time.Minute)
		dead := getAll(t, conn, top.DeadLetterQueue, len(poison))
		queues := []string{top.Queue}
		for _, d := range tiers {
			queues = append(queues, adapter.RetryName(top.Queue, d))
		}
		eventually(t, "the queue and its tiers drained", func() bool {
			for _, q := range queues {
				if depth(t, conn, q) != 0 {
					return false
				}
			}
			return true
		})
		t.Logf("%s: %d orders charged in %v", typ, orders, time.Since(begin).Round(time.Millisecond))

		// Stop both processes before counting, so that nothing runs late.
		require.NoError(t, stdin.Close())
		require.Equal(t, "stopped", testenv.Recv(t, lines, "the second process to stop"), stderr.String())
		testenv.Recv(t, exited, "the second process to exit")
		require.NoError(t, childErr, stderr.String())
		require.NoError(t, stopAll(t.Context(), cs))

		got, err := client.HGetAll(t.Context(), w.effects()).Result()
		require.NoError(t, err)
		var missing, doubled []string
		for i := range orders {
			id := fmt.Sprintf("o-%05d", i)
			switch got[id] {
			case "1":
			case "":
				missing = append(missing, id)
			default:
				doubled = append(doubled, id+"="+got[id])
			}
		}
		require.Empty(t, missing, "orders never charged (lost)")
		require.Empty(t, doubled, "orders charged more than once")
		require.Len(t, got, orders)
		failed, err := client.HLen(t.Context(), w.failed()).Result()
		require.NoError(t, err)
		require.Positive(t, failed, "no transient failure was injected")
		runs, err := client.HGetAll(t.Context(), w.sleeperRuns()).Result()
		require.NoError(t, err)
		for id := range sleepers {
			require.Equal(t, "1", runs[id], "sleeper %s ran again: its lease was not kept", id)
		}

		reasons := map[string]int{}
		for _, d := range dead {
			reasons[fmt.Sprint(d.Headers[delivery.HeaderReason])]++
			require.NotEmpty(t, d.Headers[delivery.HeaderError])
			require.Equal(t, top.Queue, d.Headers[dedupamqp.HeaderOriginalRoutingKey])
		}
		require.Equal(t, map[string]int{"undecodable": 3, "no-key": 2}, reasons)
		require.Zero(t, depth(t, conn, top.DeadLetterQueue), "more dead letters than poison")

		var st dedup.ConsumerStats
		for _, c := range cs {
			s := c.Stats()
			st.Delivered += s.Delivered
			st.DeadLettered += s.DeadLettered
			st.SettleFailures += s.SettleFailures
			st.RetriedLater += s.RetriedLater
			st.RetriedInPlace += s.RetriedInPlace
		}
		require.Zero(t, st.SettleFailures)
		t.Logf("%s, this process: %+v; transient failures %d", typ, st, failed)
	})
}

// syncBuffer collects a child's stderr, safe to read while it writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
