package dedupwatermill_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
	dedupwatermill "github.com/dedup-go/dedup/middleware/watermill"
	"github.com/dedup-go/dedup/store/redisstore"
)

// The child process of TestKilledInsideHandler: with childEnv set,
// TestMain runs childMain instead of the tests.
const (
	childEnv    = "DEDUPWM_CHILD"
	childURL    = "DEDUPWM_CHILD_URL"
	childIn     = "DEDUPWM_CHILD_IN"
	childOut    = "DEDUPWM_CHILD_OUT"
	childRedis  = "DEDUPWM_CHILD_REDIS"
	childPrefix = "DEDUPWM_CHILD_PREFIX"
	childMarker = "DEDUPWM: "
	killLease   = 2 * time.Second
)

// childMain runs a router whose handler reports the message it got and
// blocks until its context ends: the parent kills it there.
func childMain() int {
	testenv.ExitWithParent()
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "child:", err); return 1 }
	url := os.Getenv(childURL)
	if !reachable(url) {
		return fail(fmt.Errorf("RabbitMQ at %s is not reachable", url))
	}
	client := redis.NewClient(&redis.Options{Addr: os.Getenv(childRedis), ContextTimeoutEnabled: true})
	st, err := redisstore.New(context.Background(), client, &redisstore.Options{Prefix: os.Getenv(childPrefix)})
	if err != nil {
		return fail(err)
	}
	mw, err := dedupwatermill.New(st, &dedupwatermill.Options{Config: &dedup.Config{Namespace: "killed", Lease: killLease, Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		return fail(err)
	}
	sub, err := wamqp.NewSubscriber(amqpConfig(url, 1), watermill.NopLogger{})
	if err != nil {
		return fail(err)
	}
	pub, err := wamqp.NewPublisher(amqpConfig(url, 0), watermill.NopLogger{})
	if err != nil {
		return fail(err)
	}
	r, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return fail(err)
	}
	r.AddHandler("killed", os.Getenv(childIn), sub, os.Getenv(childOut), pub, func(msg *message.Message) ([]*message.Message, error) {
		fmt.Printf("%sin-handler %s\n", childMarker, msg.UUID)
		<-msg.Context().Done() // killed here
		return nil, msg.Context().Err()
	}).AddMiddleware(mw.Middleware)
	return fail(r.Run(context.Background()))
}

// TestKilledInsideHandler kills a process (SIGKILL) while its handler runs
// a message under the middleware: RabbitMQ redelivers what it held to a
// router in this process, which finds the message's id claimed by the dead
// process, holds it (never acknowledging it unprocessed) until that lease
// ends, and runs it: each message has one effect and one produced message
// downstream.
func TestKilledInsideHandler(t *testing.T) {
	t.Parallel()
	url := rabbitURL(t)
	redisAddr := testenv.Redis.Addr(t)
	in, out := topic(t, url, "kill-in"), topic(t, url, "kill-out")
	prefix := "dedupwatermill-test:" + suffix() + ":"
	pub := publisher(t, url)
	// Declare the queues before anyone publishes: the child's subscriber
	// and the publisher below would, but only once they run.
	require.NoError(t, subscriber(t, url).(message.SubscribeInitializer).SubscribeInitialize(in))
	require.NoError(t, subscriber(t, url).(message.SubscribeInitializer).SubscribeInitialize(out))

	const n = 3
	ids := publishN(t, pub, in, n, 1)
	child := testenv.StartChild(t, "^$", []string{childEnv + "=1", childURL + "=" + url, childIn + "=" + in, childOut + "=" + out,
		childRedis + "=" + redisAddr, childPrefix + "=" + prefix}, childMarker)
	child.Await(t, "in-handler "+ids[0])
	child.Kill(t)

	effects := newCounts(n)
	var mu sync.Mutex
	attempts := map[string]int{}
	inFlight := 0
	obs := delivery.ObserverFunc(func(_ context.Context, e delivery.Event) {
		mu.Lock()
		defer mu.Unlock()
		if e.Status == delivery.StatusProcessed {
			attempts[e.MessageID] = e.Attempt
		}
		if e.Status == delivery.StatusInFlight {
			inFlight++
		}
	})
	down := newCounts(n)
	dr := newRouter(t)
	dr.AddConsumerHandler("kill-down", out, subscriber(t, url), func(msg *message.Message) error {
		down.add(msg.Metadata.Get("in"))
		return nil
	})
	startRouter(t, dr)
	r := newRouter(t)
	mw := newMiddleware(t, redisStore(t, prefix), "killed", &dedupwatermill.Options{
		Config: &dedup.Config{Lease: killLease, Observer: obs}, MaxHold: 5 * killLease})
	r.AddHandler("killed", in, subscriber(t, url), out, pub, transform(effects)).AddMiddleware(mw.Middleware)
	startRouter(t, r)
	effects.await(t, "every message's effect after the kill")
	down.await(t, "every produced message downstream")

	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		require.Equal(t, 1, effects.get(id), "effects of %s", id)
		require.Equal(t, 1, down.get(id), "produced messages downstream of %s", id)
	}
	require.Equal(t, 2, attempts[ids[0]], "the killed message is run again as attempt 2")
	require.Positive(t, inFlight, "the killed message was held while the dead process's lease ran")
	t.Logf("killed inside the handler: effects %v, downstream %v, attempt of the killed message %d, in-flight looks %d",
		effects.snapshot(), down.snapshot(), attempts[ids[0]], inFlight)
}
