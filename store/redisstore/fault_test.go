package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store/redisstore"
)

// payment is the message of the fault tests.
type payment struct{ ID string }

func paymentID(p payment) (string, error) { return p.ID, nil }

// outageRun plays a broker against a receiver on a redis-server of the
// test's own: every payment is delivered twice in random order; a delivery
// the receiver answers with Retry goes back to the end of the queue. After
// stopAfter deliveries the server is killed; outage more deliveries happen
// while it is down, then it is started again and the queue is drained.
type outageRun struct {
	effects     map[string]int // handler runs per payment id
	outage      []delivery.Decision
	outageRuns  int // handler runs while Redis was down
	acked       map[string]int
	deadLetters int
	stats       dedup.Stats
}

func runOutage(t *testing.T, failOpen bool, payments, stopAfter, outage int) outageRun {
	t.Helper()
	// The server persists every write before answering, so that a kill
	// loses no record: what is tested is the store's behaviour across an
	// outage, not Redis's durability settings.
	srv := redistest.StartServer(t, "--appendonly", "yes", "--appendfsync", "always")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	store := newStore(t, c, &redisstore.Options{Timeout: 200 * time.Millisecond})

	run := outageRun{effects: map[string]int{}, acked: map[string]int{}}
	down := false
	rcv, err := dedup.NewReceiver(store, paymentID, func(ctx context.Context, p payment) (string, error) {
		run.effects[p.ID]++
		if down {
			run.outageRuns++
		}
		return "receipt-" + p.ID, nil
	}, &dedup.Config{Namespace: "pay", FailOpen: failOpen, Lease: 5 * time.Second, Retention: time.Hour})
	require.NoError(t, err)

	var queue []payment
	for i := range payments {
		id := fmt.Sprintf("p%04d", i)
		queue = append(queue, payment{id}, payment{id})
	}
	rand.Shuffle(len(queue), func(i, j int) { queue[i], queue[j] = queue[j], queue[i] })

	ctx := t.Context()
	for n := 0; len(queue) > 0; n++ {
		switch n {
		case stopAfter:
			srv.Stop()
			down = true
		case stopAfter + outage:
			srv.Start()
			down = false
		}
		p := queue[0]
		queue = queue[1:]
		res, err := rcv.Handle(ctx, p)
		d := adapter.Bind(rcv).Decide(res, err)
		if down {
			run.outage = append(run.outage, d)
		}
		switch d.Action {
		case delivery.Ack:
			run.acked[p.ID]++
		case delivery.Retry:
			queue = append(queue, p)
		case delivery.DeadLetter:
			run.deadLetters++
			t.Errorf("payment %s dead-lettered: %v", p.ID, d.Err)
		}
	}
	run.stats = rcv.Stats()
	return run
}

// TestOutageFailClosed: while Redis is down no handler runs; every
// delivery comes back as a retry; after the restart each payment is charged
// exactly once and none is lost.
func TestOutageFailClosed(t *testing.T) {
	t.Parallel()
	const payments = 200
	run := runOutage(t, false, payments, 150, 10)

	require.Len(t, run.outage, 10)
	for _, d := range run.outage {
		require.Equal(t, delivery.Retry, d.Action, "a delivery during the outage: %v", d.Err)
		require.Equal(t, delivery.ReasonStoreUnavailable, d.Reason)
		require.ErrorIs(t, d.Err, dedup.ErrStoreUnavailable)
		require.Equal(t, 1, strings.Count(d.Err.Error(), "acquire"), "the store's error is not wrapped twice: %v", d.Err)
	}
	require.Zero(t, run.outageRuns, "a handler ran unprotected under fail-closed")
	require.Len(t, run.effects, payments, "payments lost")
	for id, n := range run.effects {
		require.Equal(t, 1, n, "payment %s charged %d times", id, n)
		require.Equal(t, 2, run.acked[id], "payment %s: both deliveries acked", id)
	}
	require.Zero(t, run.deadLetters)
	require.EqualValues(t, 10, run.stats.StoreErrors)
}

// TestOutageFailOpen: while Redis is down, deliveries run unprotected with
// status bypassed; once it is back, deduplication resumes.
func TestOutageFailOpen(t *testing.T) {
	t.Parallel()
	const payments = 200
	run := runOutage(t, true, payments, 150, 10)

	require.Len(t, run.outage, 10)
	for _, d := range run.outage {
		require.Equal(t, delivery.Ack, d.Action)
		require.Equal(t, delivery.ReasonBypassed, d.Reason)
	}
	require.Equal(t, 10, run.outageRuns, "every delivery in the outage runs, unprotected")
	require.EqualValues(t, 10, run.stats.Bypassed)
	require.Len(t, run.effects, payments, "payments lost")
	// A payment delivered once during the outage and once outside it may
	// run twice: that is what fail-open trades for availability. Any other
	// payment runs once.
	extra := 0
	for _, n := range run.effects {
		require.LessOrEqual(t, n, 2)
		extra += n - 1
	}
	require.LessOrEqual(t, extra, 10, "only bypassed deliveries may repeat an effect")
	for id, n := range run.acked {
		require.Equal(t, 2, n, "payment %s: both deliveries acked", id)
	}
}
