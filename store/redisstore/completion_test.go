package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/redisstore"
	"github.com/dedup-go/dedup/store/tieredstore"
)

// outageSetup is what completionOutage runs on: a store of each process's
// own (sharing the records), and how to kill and restart the server.
type outageSetup struct {
	newStore    func(t *testing.T) store.Store
	stop, start func()
}

// completionOutage plays two consumer processes, A and B, over Redis
// servers of the test's own that persist every write before answering. A
// claims n payments; while their handlers run, a server is killed; the
// handlers succeed, so (some of) their completions fail; the server is
// started again after outage, shorter than the lease. B delivers every
// payment meanwhile, and again once every lease A held would have ended.
// It returns how many times each payment's effect happened, and A's
// results.
func completionOutage(t *testing.T, setup outageSetup, n int, outage, lease time.Duration) (map[string]int, []dedup.Result[string]) {
	t.Helper()
	var mu sync.Mutex
	effects := map[string]int{}
	gate := make(chan struct{})
	var entered sync.WaitGroup
	entered.Add(n)
	charge := func(ctx context.Context, p payment) (string, error) {
		mu.Lock()
		effects[p.ID]++
		mu.Unlock()
		return "receipt-" + p.ID, nil
	}
	cfg := &dedup.Config{Namespace: "pay", Lease: lease, Retention: time.Hour}
	a, err := dedup.NewReceiver(setup.newStore(t), paymentID, func(ctx context.Context, p payment) (string, error) {
		entered.Done()
		<-gate // the server dies while the handlers run
		return charge(ctx, p)
	}, cfg)
	require.NoError(t, err)
	b, err := dedup.NewReceiver(setup.newStore(t), paymentID, charge, cfg)
	require.NoError(t, err)

	results := make([]dedup.Result[string], n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res, err := a.Handle(context.Background(), payment{fmt.Sprintf("p%03d", i)})
			require.NoError(t, err)
			results[i] = res
		})
	}
	entered.Wait()
	setup.stop()
	close(gate)
	down := time.Now()
	for i := range 2 { // B during the outage: refused (fail-closed) or in flight, never run
		_, _ = b.Handle(t.Context(), payment{fmt.Sprintf("p%03d", i)})
	}
	time.Sleep(outage)
	setup.start()
	t.Logf("Redis was down for %v (lease %v)", time.Since(down).Round(time.Millisecond), lease)
	testenv.Wait(t, &wg, "the deliveries to return")

	time.Sleep(lease) // past every lease A held: a record left processing would be taken over now
	for i := range n {
		res, err := b.Handle(t.Context(), payment{fmt.Sprintf("p%03d", i)})
		require.NoError(t, err)
		require.True(t, res.Status.Done(), "payment %d: %s", i, res.Status)
	}
	return effects, results
}

// TestCompletionOutageNoDoubleEffect: Redis is unreachable when the
// completions of succeeded handlers are sent, for less than the lease. The
// receiver retries them while the lease holds, so no payment is charged
// twice: on redisstore, through two tiered processes, and on a 3-master
// Cluster with one master killed and restarted.
func TestCompletionOutageNoDoubleEffect(t *testing.T) {
	t.Parallel()
	persist := []string{"--appendonly", "yes", "--appendfsync", "always"}
	single := func(tiered bool) func(t *testing.T) outageSetup {
		return func(t *testing.T) outageSetup {
			srv := redistest.StartServer(t, persist...)
			return outageSetup{
				newStore: func(t *testing.T) store.Store {
					c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
					t.Cleanup(func() { _ = c.Close() })
					s := newStore(t, c, &redisstore.Options{Prefix: "outage:", Timeout: 200 * time.Millisecond})
					if !tiered {
						return s
					}
					ts, err := tieredstore.New(s, nil)
					require.NoError(t, err)
					return ts
				},
				stop: srv.Stop, start: srv.Start,
			}
		}
	}
	setups := map[string]func(t *testing.T) outageSetup{
		"redisstore":  single(false),
		"tieredstore": single(true),
		"cluster": func(t *testing.T) outageSetup {
			cc, nodes := startCluster(t, persist...)
			return outageSetup{
				newStore: func(t *testing.T) store.Store {
					return newStore(t, cc, &redisstore.Options{Prefix: "outage:", Timeout: 200 * time.Millisecond})
				},
				stop: nodes[0].Stop, start: nodes[0].Start,
			}
		},
	}
	for name, setup := range setups {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const n = 20
			effects, results := completionOutage(t, setup(t), n, 300*time.Millisecond, 6*time.Second)
			require.Len(t, effects, n, "payments lost")
			doubles := 0
			for _, k := range effects {
				doubles += k - 1
			}
			t.Logf("%d payments, %d double effects", n, doubles)
			require.Zero(t, doubles, "double effects")
			for i, res := range results {
				require.Equal(t, delivery.StatusProcessed, res.Status)
				require.NoError(t, res.Problem, "payment %d: the completion was recorded after the outage", i)
			}
		})
	}
}
