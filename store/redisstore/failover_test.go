package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store/redisstore"
)

// The failover tests play a broker against receivers on a Redis whose
// master is SIGKILLed mid-stream: every id is delivered copies times in
// shuffled order to workers goroutines (the first copy of each before and
// through the failover, the others once it is over), each delivery
// carried out as Decide says (a retry goes back to the queue after its
// delay), until every copy is acknowledged. The handler records its
// effect per id.

// failoverStream is the shape of one run.
type failoverStream struct {
	ids, copies, workers int
	// killAfter is how many first copies are settled when kill runs.
	killAfter int
	// kill kills the master; it runs on its own goroutine while the
	// workers go on.
	kill func()
	// within bounds the whole run.
	within time.Duration
}

// failoverRun is what a run measured.
type failoverRun struct {
	doubles, lost  int           // ids whose effect happened more than once, never
	doneWithIssue  []string      // done statuses that came with an error or a Problem
	deadLetters    []string      // deliveries dead-lettered
	unavailable    int           // deliveries refused as the store unavailable
	notReplicated  int           // of them, refused for too few replicas
	unsettled      int           // copies not acknowledged when the run ended
	killedAt, took time.Duration // since the start
}

func (r failoverRun) String() string {
	return fmt.Sprintf("doubles %d, lost %d, unsettled %d, done-with-issue %d, dead letters %d; %d deliveries refused as unavailable (%d for too few replicas); killed at %v, all settled at %v",
		r.doubles, r.lost, r.unsettled, len(r.doneWithIssue), len(r.deadLetters), r.unavailable, r.notReplicated,
		r.killedAt.Round(time.Millisecond), r.took.Round(time.Millisecond))
}

// runFailover runs the stream through a receiver on each of stores, as
// many consumer processes would, the workers spread over them.
func runFailover(t *testing.T, stores []*redisstore.Store, f failoverStream, cfg *dedup.Config) failoverRun {
	t.Helper()
	var effects deduptest.Effects
	handler := func(ctx context.Context, p payment) (string, error) {
		// A little work, so that the kill finds handlers between their
		// claim and their completion.
		select {
		case <-time.After(time.Duration(rand.IntN(3000)) * time.Microsecond):
		case <-ctx.Done():
			return "", ctx.Err()
		}
		effects.Record(p.ID)
		return "receipt-" + p.ID, nil
	}
	var rcvs []*dedup.Receiver[payment, string]
	for _, st := range stores {
		rcv, err := dedup.NewReceiver(st, paymentID, handler, cfg)
		require.NoError(t, err)
		rcvs = append(rcvs, rcv)
	}

	total := f.ids * f.copies
	queue := make(chan payment, total)
	// The first copy of every id flows through the kill; the others are
	// redeliveries that come once the failover is over, and find what the
	// new master kept of the first.
	var first, later []payment
	for i := range f.ids {
		first = append(first, payment{ID: "p" + strconv.Itoa(i)})
		for range f.copies - 1 {
			later = append(later, payment{ID: "p" + strconv.Itoa(i)})
		}
	}
	shuffle := func(ps []payment) { rand.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] }) }
	shuffle(first)
	shuffle(later)
	for _, p := range first {
		queue <- p
	}
	var (
		mu      sync.Mutex
		run     failoverRun
		settled atomic.Int64
		start   = time.Now()
		killNow = make(chan struct{})
		done    = make(chan struct{})
		workers sync.WaitGroup
		timers  sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(t.Context(), f.within)
	defer func() {
		cancel()
		workers.Wait()
		timers.Wait() // the queue has room for every copy: no timer blocks
	}()
	settle := func() {
		switch settled.Add(1) {
		case int64(f.killAfter):
			close(killNow)
		case int64(total):
			close(done)
		}
	}
	for w := range f.workers {
		rcv := rcvs[w%len(rcvs)]
		workers.Go(func() {
			for {
				var p payment
				select {
				case p = <-queue:
				case <-done:
					return
				case <-ctx.Done():
					return
				}
				d := adapter.Bind(rcv).Deliver(ctx, p)
				res, herr := d.Result, d.Err
				mu.Lock()
				if res.Status.Done() && (herr != nil || res.Problem != nil) {
					run.doneWithIssue = append(run.doneWithIssue, fmt.Sprintf("%s: %v: %v, problem %v", p.ID, res.Status, herr, res.Problem))
				}
				if d.Decision.Reason == delivery.ReasonStoreUnavailable {
					run.unavailable++
					if errors.Is(herr, redisstore.ErrNotReplicated) {
						run.notReplicated++
					}
				}
				mu.Unlock()
				d.Settled(adapter.Settlement{})
				switch d.Decision.Action {
				case delivery.Ack:
					settle()
				case delivery.DeadLetter:
					mu.Lock()
					run.deadLetters = append(run.deadLetters, fmt.Sprintf("%s: %v", p.ID, d.Decision.Err))
					mu.Unlock()
					settle()
				default: // a retry: back to the queue after its delay
					timers.Add(1)
					time.AfterFunc(d.Decision.Delay, func() {
						defer timers.Done()
						queue <- p
					})
				}
			}
		})
	}
	select {
	case <-killNow:
		run.killedAt = time.Since(start)
		f.kill() // on the test's goroutine, so that it may fail the test
		for _, p := range later {
			queue <- p
		}
	case <-ctx.Done():
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
	cancel()
	workers.Wait()
	mu.Lock()
	defer mu.Unlock()
	run.took = time.Since(start)
	run.unsettled = total - int(settled.Load())
	for i := range f.ids {
		switch n := effects.Count("p" + strconv.Itoa(i)); {
		case n > 1:
			run.doubles++
		case n == 0:
			run.lost++
		}
	}
	return run
}

// requireClean fails t unless the run had every effect once and settled
// every delivery, with no done status carrying an error.
func requireClean(t *testing.T, run failoverRun) {
	t.Helper()
	require.Zero(t, run.doubles, "double effects: %v", run)
	require.Zero(t, run.lost, "lost: %v", run)
	require.Zero(t, run.unsettled, "unsettled: %v", run)
	require.Empty(t, run.doneWithIssue, "done statuses with an error: %v", run)
	require.Empty(t, run.deadLetters, "dead letters: %v", run)
}

// failoverStreamSize is the stream of the CI runs; FAILOVER_IDS makes it
// longer for a measuring run.
func failoverStreamSize() int {
	if n, err := strconv.Atoi(os.Getenv("FAILOVER_IDS")); err == nil && n > 0 {
		return n
	}
	return 600
}

// TestSentinelFailover: a master with one replica and three Sentinels; a
// third of the way through a stream of 3 copies of each id (8 workers,
// two consumer processes), the replica's link to the master is cut, the
// master goes on acknowledging writes for half a second and is SIGKILLed:
// the Sentinels promote the replica without the writes of that half
// second, and go-redis's FailoverClient follows. With MinReplicas 1 and
// the default lease, none of those writes was reported done: every effect
// happens once and every delivery is settled. Without MinReplicas
// (FAILOVER_MIN_REPLICAS=0) the same run doubles effects.
//
// The new master has no replica until the old one comes back; until then
// writes fall short of MinReplicas and are refused: a delay. The test
// starts it again, empty, once every Sentinel names the new master, as a
// replica of the new master (replicaof) with replica-priority 0: a server
// without the data must never be promoted. Started as a master with
// replica-priority 0 alone, it was promoted all the same (a CI run, 204
// doubles): a master's INFO does not report its replica priority, so the
// Sentinels took the default for it when a second failover (the new master
// judged down on a loaded machine, a second after the first) chose a
// replica, and the new master then became the empty server's replica,
// dropping every record.
func TestSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis, a replica and three Sentinels")
	}
	t.Parallel()
	g := redistest.StartSentinel(t, 1, time.Second)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the Sentinels' events:\n%s", g.Events())
		}
	})
	var stores []*redisstore.Store
	prefix := ""
	for range 2 { // two consumer processes, each with its client
		client := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: redistest.SentinelMaster, SentinelAddrs: g.Addrs(),
			ContextTimeoutEnabled: true, DialTimeout: time.Second,
		})
		t.Cleanup(func() { _ = client.Close() })
		if prefix == "" {
			prefix = redistest.Prefix(t, client)
		}
		stores = append(stores, newStore(t, client, &redisstore.Options{Prefix: prefix, MinReplicas: failoverMinReplicas()}))
	}
	old := g.Master
	ids := failoverStreamSize()
	run := runFailover(t, stores, failoverStream{
		ids: ids, copies: 3, workers: 8, killAfter: ids / 3, within: 2 * time.Minute,
		kill: func() {
			g.Links[0].Cut()
			time.Sleep(500 * time.Millisecond)
			old.Stop()
			master := g.WaitFailover(t, old.Addr(), 30*time.Second)
			host, port, err := net.SplitHostPort(master)
			require.NoError(t, err)
			// Empty, it must never be promoted: on a loaded machine the
			// Sentinels judge the new master down a second after the
			// failover (down-after is 1s here) and promote a replica. A
			// replica's INFO reports its priority from the start; a
			// master's does not.
			old.StartWith("--replicaof", host, port, "--replica-priority", "0")
		},
	}, &dedup.Config{Namespace: "pay", Retention: time.Hour, StoreRetryDelay: time.Second, Logger: quiet})
	t.Log(run)
	requireClean(t, run)
}

// TestClusterFailover runs on one Redis Cluster of three masters with one
// replica each (cluster-node-timeout 1s): the batch rules with MinReplicas
// 1 (each master's pipeline ending with its WAIT; TestReplicatedStoretest
// runs the whole suite on one master), the WAIT of each write on its own
// master (waitOnOwnMaster),
// the slot map reloaded after a failover (slotMapReloaded), and the stream
// of TestSentinelFailover with a master SIGKILLed mid-stream (clusterStream).
func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster of three masters and three replicas")
	}
	t.Parallel()
	cc, nodes := redistest.StartClusterReplicas(t, 1,
		"--cluster-node-timeout", "1000", "--cluster-replica-validity-factor", "0", "--repl-diskless-sync-delay", "0")
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	for _, n := range nodes[:3] {
		require.Equal(t, "master", redistest.Role(t.Context(), n.Addr()))
	}
	t.Run("BatchRules", func(t *testing.T) {
		batchRules(t, newStore(t, cc, &redisstore.Options{MinReplicas: 1, ReplicaTimeout: healthy}))
	})
	t.Run("WaitOnOwnMaster", func(t *testing.T) { waitOnOwnMaster(t, cc, nodes) })
	t.Run("SlotMapReloaded", func(t *testing.T) { slotMapReloaded(t, addrs, nodes, nodes[1]) })
	t.Run("Stream", func(t *testing.T) { clusterStream(t, addrs, nodes, nodes[0]) })
}

// clusterStream: the stream of TestSentinelFailover over the Cluster, the
// master old SIGKILLed mid-stream; the cluster promotes its replica. The
// clients keep go-redis's default ClusterStateReloadInterval (a minute):
// the store has them reload their slot map when a call fails with a
// network error. The old master is started again and rejoins as a
// replica of the new one; until then its shard's writes fall short of
// MinReplicas.
func clusterStream(t *testing.T, addrs []string, nodes []*redistest.Server, old *redistest.Server) {
	var stores []*redisstore.Store
	prefix := ""
	for range 2 {
		client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, DialTimeout: time.Second})
		t.Cleanup(func() { _ = client.Close() })
		if prefix == "" {
			prefix = redistest.Prefix(t, client)
		}
		stores = append(stores, newStore(t, client, &redisstore.Options{Prefix: prefix, MinReplicas: failoverMinReplicas()}))
	}
	replica := replicaOf(t, nodes, old)
	ids := failoverStreamSize()
	run := runFailover(t, stores, failoverStream{
		ids: ids, copies: 3, workers: 8, killAfter: ids / 3, within: 2 * time.Minute,
		kill: func() {
			old.Stop()
			redistest.WaitRole(t, replica.Addr(), "master", 30*time.Second)
			old.Start()
		},
	}, &dedup.Config{Namespace: "pay", Retention: time.Hour, StoreRetryDelay: time.Second, Logger: quiet})
	t.Log(run)
	requireClean(t, run)
}

// replicaOf returns the node of nodes that replicates master.
func replicaOf(t *testing.T, nodes []*redistest.Server, master *redistest.Server) *redistest.Server {
	t.Helper()
	for _, n := range nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr()})
		info, err := c.Info(t.Context(), "replication").Result()
		_ = c.Close()
		require.NoError(t, err)
		if strings.Contains(info, "master_port:"+strconv.Itoa(master.Port())+"\r\n") {
			return n
		}
	}
	t.Fatalf("no node replicates %s", master.Addr())
	return nil
}

// failoverMinReplicas is Options.MinReplicas of the failover tests: 1,
// or FAILOVER_MIN_REPLICAS for a run that shows what happens without.
func failoverMinReplicas() int {
	if n, err := strconv.Atoi(os.Getenv("FAILOVER_MIN_REPLICAS")); err == nil && n >= 0 {
		return n
	}
	return 1
}

// quiet drops the receiver's log lines: a failover refuses hundreds of
// deliveries, each logged, which would bury the test's own output.
var quiet = slog.New(slog.DiscardHandler)
