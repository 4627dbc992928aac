package dedupkafka_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store/redisstore"
	"github.com/dedup-go/dedup/store/tieredstore"
)

// The consumer processes of TestRebalanceStalls run with childMode set to
// "rebalance": the receiver has the default lease (30s) over a tieredstore
// in front of the shared Redis, and each handler costs handlerCost.
const (
	childMode           = "DEDUP_KAFKA_CHILD_MODE"
	rebalanceMode       = "rebalance"
	rebalancePartitions = 12
	handlerCost         = 4 * time.Millisecond
	// The stream: perTick new orders every tick, three in ten sent again
	// copyTicks later (a producer retry: same Message-Id, later offset), and
	// a burst of burstSize new orders at the join.
	tick      = 50 * time.Millisecond
	perTick   = 8
	copyTicks = 10
	burstSize = 1200
)

// runRebalanceChild is a consumer process of TestRebalanceStalls: it
// writes "E <id> <pid> <partition> <offset> <unix ns>" per effect, "S <id>
// <unix ns>" when, after SIGUSR1, a handler hangs (until the test kills the
// process), and on SIGTERM stops cleanly and writes "T <processed>
// <duplicates> <in flight>" (the receiver's Stats).
func runRebalanceChild() error {
	ch, err := startChild()
	if err != nil {
		return err
	}
	defer ch.close()
	log, ctx, hang, line := ch.log, ch.ctx, ch.hang, ch.line

	rc := redis.NewClient(&redis.Options{Addr: os.Getenv(childRedis)})
	defer rc.Close()
	remote, err := redisstore.New(ctx, rc, &redisstore.Options{Prefix: os.Getenv(childRedisPrefix)})
	if err != nil {
		return err
	}
	st, err := tieredstore.New(remote, nil)
	if err != nil {
		return err
	}
	handler := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		select {
		case <-hang:
			line("S %s %d", m.Body.ID, time.Now().UnixNano())
			<-ctx.Done() // until the test kills the process
			return Receipt{}, ctx.Err()
		default:
		}
		t := time.NewTimer(handlerCost)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return Receipt{}, ctx.Err()
		}
		line("E %s %d %d %d %d", m.Body.ID, os.Getpid(), m.Partition, m.Offset, time.Now().UnixNano())
		return Receipt{OrderID: m.Body.ID}, nil
	}
	// The default lease: what the test measures is what a rebalance costs
	// with it.
	rcv, err := dedup.NewReceiver(st, idstrategy.MessageHeader[Order](dedupkafka.HeaderMessageID), handler,
		&dedup.Config{Namespace: "billing", Logger: log})
	if err != nil {
		return err
	}
	r := kafka.NewReader(readerConfig(strings.Split(os.Getenv(childBrokers), ","), os.Getenv(childGroup), os.Getenv(childTopic)))
	defer r.Close() // after the Consumer's Stop: leaves the group
	// One handler at a time (Concurrency 1): when the test kills the
	// process in the hanging handler, no other handler is between its
	// effect and its completion, so a kill repeats no effect. Other options
	// are the defaults.
	c, err := dedupkafka.NewConsumer(r, rcv, &dedupkafka.Options{DropPoison: true, Concurrency: 1})
	if err != nil {
		return err
	}
	if err := c.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-c.Stopped():
		return fmt.Errorf("consumer stopped: %w", c.Err())
	}
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = c.Stop(sctx)
	s := rcv.Stats()
	line("T %d %d %d", s.Processed, s.Duplicates, s.InFlight)
	return err
}

// TestRebalanceStalls measures what a consumer joining a busy group and a
// consumer killed in a handler cost each partition, with the default 30s
// lease, over consumer processes (the test binary re-executed) sharing
// Redis: a and b consume a steady stream with duplicates; a burst
// of orders comes (the group lags: the old owners have fetched well ahead)
// and c joins; then a is SIGKILLed inside a handler, holding its key.
//
// After the join, no partition goes 3s without an effect: the new owner of
// a partition meets keys its old owner still handles from what it had
// fetched, and looks at them again within a fraction of a second instead
// of after the lease. After the kill, the partition whose key the dead
// consumer held waits out the rest of that lease (nothing can tell a dead
// holder from a slow one), at most the lease plus a second; the other
// partitions move on after the group's session timeout. Every order has
// its effect exactly once, and every partition is committed to its end.
func TestRebalanceStalls(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 30s lease")
	}
	t.Parallel()
	const topic, group = "orders", "billing"
	brokers := startKafka(t, rebalancePartitions, topic)
	rc := redistest.Client(t)
	prefix := redistest.Prefix(t, rc)
	dir := t.TempDir()

	start := func(name string) *process {
		p := &process{name: name, effects: filepath.Join(dir, name+".effects"), stderr: &bytes.Buffer{}, exited: make(chan error, 1)}
		p.cmd = exec.Command(os.Args[0])
		p.cmd.Env = append(os.Environ(),
			childEnv+"=1",
			childMode+"="+rebalanceMode,
			childBrokers+"="+strings.Join(brokers, ","),
			childTopic+"="+topic,
			childGroup+"="+group,
			childRedis+"="+rc.Options().Addr,
			childRedisPrefix+"="+prefix,
			childEffects+"="+p.effects,
		)
		p.cmd.Stderr = p.stderr
		require.NoError(t, p.cmd.Start())
		go func() { p.exited <- p.cmd.Wait() }() // ends with the process, which the test ends
		t.Cleanup(func() {
			_ = p.cmd.Process.Kill() // by its PID
			<-p.exited
			if t.Failed() && p.stderr.Len() > 0 {
				t.Logf("%s stderr:\n%s", p.name, p.stderr.String())
			}
		})
		return p
	}

	prod := startProducer(t, newWriter(t, brokers), topic)
	a, b := start("a"), start("b")
	procs := []*process{a, b}
	read := func() *run { return readRun(t, procs) }
	eventually(t, time.Minute, func() bool {
		r := read()
		return r.handled["a"] > 0 && r.handled["b"] > 0
	}, "a and b never both handled orders")
	time.Sleep(2 * time.Second) // a steady state before the join

	// The group lags: a burst, fetched ahead by a and b; c joins.
	prod.burst()
	joinAt := time.Now()
	c := start("c")
	procs = append(procs, c)
	eventually(t, 30*time.Second, func() bool { return read().handled["c"] > 0 }, "c never handled an order")
	time.Sleep(time.Until(joinAt.Add(8 * time.Second)))

	// Kill a inside a handler: its key stays held for the rest of its lease.
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGUSR1))
	var stuck string
	eventually(t, 30*time.Second, func() bool { stuck = read().stuck; return stuck != "" }, "a never hung in a handler")
	hangAt := read().stuckAt
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGKILL))
	killAt := time.Now()
	time.Sleep(time.Until(killAt.Add((30 * time.Second) + 3*time.Second)))
	want := prod.stop()

	eventually(t, time.Minute, func() bool { return len(read().firsts) >= len(want) }, "orders handled")
	// Every partition committed to its end by the running group, before
	// anyone stops: a commit kafka-go sends while a generation ends is
	// refused (REBALANCE_IN_PROGRESS), and the next tick's commits it again;
	// a consumer stopping rebalances the other, so checking only after both
	// stop could find a last commit lost to that (the messages would be read
	// again and answered as duplicates, never run twice).
	ends := endOffsets(t, brokers, topic, rebalancePartitions)
	eventually(t, time.Minute, func() bool {
		return reflect.DeepEqual(ends, committed(t, brokers, group, topic, rebalancePartitions))
	}, "every partition committed to its end")
	for _, p := range []*process{b, c} {
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	}
	for _, p := range []*process{b, c} {
		select {
		case err := <-p.exited:
			require.NoError(t, err, "%s did not stop cleanly: %s", p.name, p.stderr.String())
			p.exited <- err // for the cleanup
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not stop", p.name)
		}
	}

	r := read()
	r.counts.ExactlyOnce(want...).Check(t)
	require.Contains(t, r.firsts, stuck, "the order the killed consumer held")
	require.Equal(t, ends, committed(t, brokers, group, topic, rebalancePartitions))

	joinStalls := r.stalls(joinAt, hangAt, true)
	killStalls := r.stalls(hangAt, time.Now(), false)
	joinPart, joinWorst := worst(joinStalls)
	killPart, killWorst := worst(killStalls)
	figures := killFigures(t, procs, stuck, hangAt, killAt, r.firsts[stuck], killStalls)
	delete(killStalls, killPart)
	_, killOthers := worst(killStalls)
	rate := func(from time.Time, d time.Duration) float64 {
		return float64(r.between(from, from.Add(d))) / d.Seconds()
	}
	t.Logf("produced %d orders (%.0f/s steady, a burst of %d at the join), %d copies", len(want), float64(perTick)/tick.Seconds(), burstSize, prod.copies.Load())
	t.Logf("after the join: longest stall %v (partition %d); %.0f orders/s in the 5s after, %.0f/s in the 2s before",
		joinWorst.Round(time.Millisecond), joinPart, rate(joinAt, 5*time.Second), rate(joinAt.Add(-2*time.Second), 2*time.Second))
	t.Logf("after the kill: longest stall %v (partition %d, whose order %s the dead consumer held), the other partitions %v; %.0f orders/s in the 5s after",
		killWorst.Round(time.Millisecond), killPart, stuck, killOthers.Round(time.Millisecond), rate(killAt, 5*time.Second))
	t.Logf("in-flight answers (looks at keys held elsewhere) of the consumers that stopped cleanly: b %d, c %d", r.inFlight["b"], r.inFlight["c"])
	doubles, lost := 0, 0
	for _, id := range want {
		switch n := r.counts.Count(id); {
		case n == 0:
			lost++
		case n > 1:
			doubles++
		}
	}
	// The figures in the one-line form scripts/kafka-stalls.sh reads, as
	// dedupfranz's TestStallsJoinKill writes them.
	t.Logf("STALLS adapter=dedupkafka join_worst=%s join_partition=%d %s orders=%d doubles=%d lost=%d committed_to_end=true",
		secs(joinWorst), joinPart, figures, len(want), doubles, lost)
	require.Less(t, joinWorst, 3*time.Second, "a partition stalled after the join")
	require.LessOrEqual(t, killWorst, (30*time.Second)+time.Second, "a partition stalled after the kill")
}

// killFigures returns the figures of the kill in the form of
// scripts/kafka-stalls.sh: the partition whose key the killed consumer a
// held (order stuck, whose effect came at ran), how long it stalled and
// how long after the kill its order ran, against the rest of the lease;
// and the longest stall of the other partitions, of those a owned when it
// hung (they move after the session timeout) and of the survivors' own.
func killFigures(t testing.TB, procs []*process, stuck string, hangAt, killAt, ran time.Time, stalls map[int]time.Duration) string {
	n, err := strconv.Atoi(strings.TrimPrefix(stuck, "o-"))
	require.NoError(t, err)
	held := n % rebalancePartitions
	owners := map[int]string{} // the process of each partition's last effect before the hang
	last := map[int]time.Time{}
	for _, p := range procs {
		for _, l := range lines(t, p.effects) {
			if l[0] != "E" || len(l) != 6 {
				continue
			}
			part, err := strconv.Atoi(l[3])
			require.NoError(t, err)
			v, err := strconv.ParseInt(l[5], 10, 64)
			require.NoError(t, err)
			if at := time.Unix(0, v); at.Before(hangAt) && at.After(last[part]) {
				owners[part], last[part] = p.name, at
			}
		}
	}
	var others, dead, survivors time.Duration
	for p, d := range stalls {
		switch {
		case p == held:
		case owners[p] == "a":
			dead, others = max(dead, d), max(others, d)
		default:
			survivors, others = max(survivors, d), max(others, d)
		}
	}
	rest := hangAt.Add(30 * time.Second).Sub(killAt) // the default lease
	return fmt.Sprintf("held_partition=%d held_stall=%s held_after_kill=%s rest_of_lease=%s held_over_lease=%s others_worst=%s others_dead_members=%s others_survivors=%s",
		held, secs(stalls[held]), secs(ran.Sub(killAt)), secs(rest), secs(ran.Sub(killAt)-rest), secs(others), secs(dead), secs(survivors))
}

func secs(d time.Duration) string { return fmt.Sprintf("%.3fs", d.Seconds()) }

// worst returns the partition with the longest stall.
func worst(stalls map[int]time.Duration) (int, time.Duration) {
	part, longest := -1, time.Duration(0)
	for p, d := range stalls {
		if d > longest {
			part, longest = p, d
		}
	}
	return part, longest
}

// producer writes the stream of TestRebalanceStalls until stopped.
type producer struct {
	t       testing.TB
	w       *kafka.Writer
	topic   string
	bursts  chan struct{}
	quit    chan struct{}
	done    chan struct{}
	next    int // orders produced
	copies  atomic.Int64
	pending map[int][]kafka.Message // tick -> copies due
}

func startProducer(t testing.TB, w *kafka.Writer, topic string) *producer {
	p := &producer{t: t, w: w, topic: topic, bursts: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}), pending: map[int][]kafka.Message{}}
	go p.run() // ends with quit, which stop (or the cleanup) closes
	t.Cleanup(func() { p.stop() })
	return p
}

func (p *producer) order(n int) kafka.Message {
	id := orderID(n)
	m := []kafka.Message{{Topic: p.topic, Partition: n % rebalancePartitions, Key: []byte(id), Value: orderJSON(p.t, Order{ID: id, Cents: n})}}
	dedupkafka.StampMessageID(m, nil)
	return m[0]
}

func (p *producer) run() {
	defer close(p.done)
	tk := time.NewTicker(tick)
	defer tk.Stop()
	for i := 0; ; i++ {
		n := perTick
		select {
		case <-p.quit:
			// The copies still due, so that every one is sent.
			var rest []kafka.Message
			for _, ms := range p.pending {
				rest = append(rest, ms...)
			}
			p.write(rest)
			return
		case <-p.bursts:
			n = burstSize
		case <-tk.C:
		}
		out := p.pending[i]
		delete(p.pending, i)
		for range n {
			m := p.order(p.next)
			out = append(out, m)
			if p.next%10 < 3 {
				p.pending[i+copyTicks] = append(p.pending[i+copyTicks], m)
				p.copies.Add(1)
			}
			p.next++
		}
		if !p.write(out) {
			return
		}
	}
}

func (p *producer) write(msgs []kafka.Message) bool {
	if len(msgs) == 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.w.WriteMessages(ctx, msgs...); err != nil {
		p.t.Errorf("produce: %v", err)
		return false
	}
	return true
}

// burst writes burstSize orders at once.
func (p *producer) burst() { p.bursts <- struct{}{} }

// stop stops producing and returns the ids of every order produced.
func (p *producer) stop() []string {
	select {
	case <-p.quit:
	default:
		close(p.quit)
	}
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		p.t.Errorf("the producer did not stop")
		return nil
	}
	ids := make([]string, p.next)
	for n := range ids {
		ids[n] = orderID(n)
	}
	return ids
}

// run is what the consumer processes of TestRebalanceStalls wrote.
type run struct {
	counts   deduptest.Effects    // effects per order id
	firsts   map[string]time.Time // first effect per order id
	handled  map[string]int       // effects per process
	inFlight map[string]uint64    // the receiver's Stats().InFlight per process, written when it stopped
	parts    map[int][]time.Time  // effect times per partition, in order
	stuck    string               // the order of the hanging handler
	stuckAt  time.Time
}

func readRun(t testing.TB, procs []*process) *run {
	t.Helper()
	r := &run{firsts: map[string]time.Time{}, handled: map[string]int{}, inFlight: map[string]uint64{}, parts: map[int][]time.Time{}}
	ns := func(s string) time.Time {
		v, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err)
		return time.Unix(0, v)
	}
	for _, p := range procs {
		for _, l := range lines(t, p.effects) {
			switch {
			case l[0] == "E" && len(l) == 6:
				at := ns(l[5])
				part, err := strconv.Atoi(l[3])
				require.NoError(t, err)
				r.counts.Record(l[1])
				if f, ok := r.firsts[l[1]]; !ok || at.Before(f) {
					r.firsts[l[1]] = at
				}
				r.handled[p.name]++
				r.parts[part] = append(r.parts[part], at)
			case l[0] == "S" && len(l) == 3:
				r.stuck, r.stuckAt = l[1], ns(l[2])
			case l[0] == "T" && len(l) == 4:
				v, err := strconv.ParseUint(l[3], 10, 64)
				require.NoError(t, err)
				r.inFlight[p.name] = v
			}
		}
	}
	for _, ts := range r.parts {
		slices.SortFunc(ts, func(x, y time.Time) int { return x.Compare(y) })
	}
	return r
}

// stalls returns, per partition, the longest time after from and before
// to that the partition went without an effect: between consecutive
// effects, or, under open, from its last effect before to until to (a
// stall still going on).
func (r *run) stalls(from, to time.Time, open bool) map[int]time.Duration {
	out := map[int]time.Duration{}
	for part, ts := range r.parts {
		for i, prev := range ts {
			if !prev.Before(to) {
				break
			}
			var next time.Time
			switch {
			case i+1 < len(ts) && (!open || ts[i+1].Before(to)):
				next = ts[i+1]
			case open:
				next = to
			default:
				continue
			}
			if next.After(from) {
				out[part] = max(out[part], next.Sub(later(prev, from)))
			}
		}
	}
	return out
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// between counts the orders whose first effect was in [from, to).
func (r *run) between(from, to time.Time) int {
	n := 0
	for _, at := range r.firsts {
		if !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return n
}
