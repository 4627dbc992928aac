package dedupfranz_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	dedupfranz "github.com/dedup-go/dedup/adapters/franz"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/memstore"
)

// The test binary re-executed with kfakeDirEnv set is the broker process
// of TestBrokerCrash: a kfake cluster of one broker on the port in
// kfakePortEnv, persisting to the directory in kfakeDirEnv (kfake.DataDir),
// so that a cluster started again on them after a SIGKILL finds its
// topics, records and committed offsets. It reports "KFAKE ready" on its
// standard output once it listens, and runs until killed (or until the
// test that started it is gone).
const (
	crashEnv     = "DEDUP_KAFKA_CRASH"
	kfakeDirEnv  = "DEDUP_FRANZ_KFAKE_DIR"
	kfakePortEnv = "DEDUP_FRANZ_KFAKE_PORT"
	kfakeMarker  = "KFAKE "
	crashTopic   = "orders-crash"
	crashParts   = 6
)

// TestKfakeProcess is the broker process of TestBrokerCrash; run alone it
// skips.
func TestKfakeProcess(t *testing.T) {
	dir := os.Getenv(kfakeDirEnv)
	if dir == "" {
		t.Skip("the broker process of TestBrokerCrash, which starts it")
	}
	testenv.ExitWithParent()
	port, err := strconv.Atoi(os.Getenv(kfakePortEnv))
	require.NoError(t, err)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.DataDir(dir),
		kfake.SeedTopics(crashParts, crashTopic), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	require.NoError(t, err)
	defer c.Close()
	fmt.Printf("%sready %s\n", kfakeMarker, c.ListenAddrs()[0])
	<-ctx.Done() // until SIGKILL (or SIGTERM, or the parent test is gone)
}

// crashRun is what one run of TestBrokerCrash measured.
type crashRun struct {
	kills                  []time.Time
	downtimes              []time.Duration
	committedBefore, after []map[int32]int64
}

// TestBrokerCrash runs the broker (kfake with its DataDir) as a process of
// its own, SIGKILLs it twice (started again at once the first time, after
// 1.5s the second) while a producer writes a stream of 8,000
// orders of 240 keys on 6 partitions (a quarter of them produced twice,
// plus whatever the producer's own retries add around a crash) and two
// consumers of one group, over one store, read it, and starts it again
// on the same port and directory each time. Every order has its effect
// once, each key's first effects are in order, and every partition is
// committed to its end. The committed offsets of the group survive each
// crash (checked: kfake's groups.log).
//
// It takes about half a minute: it runs only with DEDUP_KAFKA_CRASH=1,
// outside make test.
func TestBrokerCrash(t *testing.T) {
	if os.Getenv(crashEnv) != "1" {
		t.Skipf("the broker-process crash runs take time: set %s=1 to run them (outside make test)", crashEnv)
	}
	const group = "g-orders-crash"
	s := keyedStream{orders: 8000, keys: 240, partitions: crashParts, copyEvery: 4, copyLag: 17}
	dir := t.TempDir()
	port := testenv.FreePort(t)
	env := []string{kfakeDirEnv + "=" + dir, kfakePortEnv + "=" + strconv.Itoa(port)}
	startBroker := func() *testenv.Child {
		ch := testenv.StartChild(t, "^TestKfakeProcess$", env, kfakeMarker)
		ch.Await(t, "ready")
		return ch
	}
	broker := startBroker()
	addrs := []string{"127.0.0.1:" + strconv.Itoa(port)}

	// Without idempotence: a produce retried across a crash may be
	// stored twice, as a real producer's retries are.
	prod, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DisableIdempotentWrite(), kgo.ProducerLinger(0), kgo.MetadataMinAge(50*time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }))
	require.NoError(t, err)
	t.Cleanup(prod.Close)

	st, err := memstore.New(&memstore.Options{Capacity: 4 * s.orders})
	require.NoError(t, err)
	l := newLedger(s)
	l.delay = time.Millisecond // handlers in flight at each crash
	var rs reasons
	obs := rs.observer()
	a := orderConsumer(t, addrs, group, crashTopic, st, l, obs)
	b := orderConsumer(t, addrs, group, crashTopic, st, l, obs)
	var evA, evB events
	dedupfranz.OnRebalance(a, evA.record)
	dedupfranz.OnRebalance(b, evB.record)
	start(t, a)
	start(t, b)

	records := s.records(t, crashTopic)
	chunks := slices.Collect(slices.Chunk(records, 100))
	killAt := []int{len(chunks) / 3, 2 * len(chunks) / 3}
	downFor := []time.Duration{0, 1500 * time.Millisecond}
	produced := make(chan int, len(chunks)) // chunks produced, as they are
	prodErr := make(chan error, 1)
	go func() { // the stream, at its pace, through the crashes
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for k, chunk := range chunks {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			err := prod.ProduceSync(ctx, chunk...).FirstErr()
			cancel()
			if err != nil {
				prodErr <- fmt.Errorf("chunk %d: %w", k, err)
				return
			}
			produced <- k + 1
			<-tick.C
		}
		prodErr <- nil
	}()
	awaitChunks := func(n int) {
		t.Helper()
		for {
			select {
			case k := <-produced:
				if k >= n {
					return
				}
			case err := <-prodErr:
				require.NoError(t, err, "the producer")
				t.Fatalf("the producer ended before chunk %d", n)
			case <-time.After(testenv.WaitTimeout):
				t.Fatalf("timed out waiting for chunk %d to be produced", n)
			}
		}
	}

	var run crashRun
	for i, k := range killAt {
		awaitChunks(k)
		before, _ := committedOffsets(addrs, group, s.partitions)
		run.committedBefore = append(run.committedBefore, before)
		killed := time.Now()
		broker.Kill(t) // SIGKILL, by its pid; reaped
		// The broker stays down: at once for the first crash, then
		// longer than the members' session timeout (1s) and through
		// several of the producer's retries.
		<-time.After(downFor[i])
		broker = startBroker()
		run.kills = append(run.kills, killed)
		run.downtimes = append(run.downtimes, time.Since(killed))
		after, err := committedOffsets(addrs, group, s.partitions)
		require.NoError(t, err, "the committed offsets after the restart")
		run.after = append(run.after, after)
		for p, off := range before {
			require.GreaterOrEqual(t, after[p], off, "partition %d: a committed offset did not survive the crash", p)
		}
	}
	for {
		select {
		case <-produced:
			continue
		case err := <-prodErr:
			require.NoError(t, err, "the producer")
		case <-time.After(2 * time.Minute):
			t.Fatal("timed out waiting for the stream to be produced")
		}
		break
	}

	l.awaitAll(time.Minute)
	// Every partition committed to its end, within 30s (checked below,
	// after the counts are logged).
	ok, got, end := committedToEnd(addrs, group, crashTopic, s.partitions)
	for deadline := time.Now().Add(30 * time.Second); !ok && time.Now().Before(deadline); {
		<-time.After(50 * time.Millisecond)
		ok, got, end = committedToEnd(addrs, group, crashTopic, s.partitions)
	}
	var stored int64
	for _, off := range end {
		stored += off
	}

	r := l.tally(s.ids())
	t.Logf("orders %d, copies %d, records produced %d, stored %d (producer retries: %d); effects %d, doubles %d, lost %d, unexpected %d, keys out of order %d; duplicates answered %d, in flight elsewhere %d",
		s.orders, s.copies(), len(records), stored, stored-int64(len(records)), r.effects, r.doubles, r.lost, r.unexpected, r.outOfOrder,
		rs.get(delivery.ReasonDuplicate), rs.get(delivery.ReasonInFlight))
	for i, at := range run.kills {
		window := 10 * time.Second // up to the next crash
		if i+1 < len(run.kills) {
			window = run.kills[i+1].Sub(at)
		}
		longest, resumed := l.stall(at, window, at.Add(run.downtimes[i]))
		t.Logf("crash %d: broker down %v (kill to ready); longest gap between two effects of a partition after the kill (until the next) %v; every partition had an effect again %v after the restart; committed before %v, after restart %v",
			i+1, run.downtimes[i].Round(time.Millisecond), longest.Round(time.Millisecond), resumed.Round(time.Millisecond), run.committedBefore[i], run.after[i])
	}
	for p := range s.partitions {
		t.Logf("partition %d: committed %d, end %d", p, got[p], end[p])
	}
	for _, m := range []struct {
		name string
		c    *dedupfranz.Consumer[Order, Receipt]
		ev   *events
	}{{"a", a, &evA}, {"b", b, &evB}} {
		m.ev.mu.Lock()
		n := map[string]int{}
		for _, e := range m.ev.all {
			if len(e.parts[crashTopic]) > 0 {
				n[e.name]++
			}
		}
		m.ev.mu.Unlock()
		t.Logf("consumer %s: callbacks naming partitions %v, stats %+v", m.name, n, m.c.Stats())
	}
	require.Equal(t, tally{effects: s.orders}, r, "effects: exactly once per order, each key's first effects in order")
	require.Equal(t, end, got, "every partition committed to its end")
}

// committedOffsets returns the group's committed offsets, within a few
// seconds.
func committedOffsets(addrs []string, group string, partitions int32) (map[int32]int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return committed(ctx, addrs, group, crashTopic, partitions)
}
