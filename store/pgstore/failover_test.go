package pgstore_test

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store/pgstore"
)

// failoverCase is one failover: how the standby replicates, the
// receivers' lease, and how long the HA manager takes between the
// primary's death and the promotion.
type failoverCase struct {
	mode   replication
	lease  time.Duration // 0: the receiver's default (30s)
	detect time.Duration // from the kill to the promotion
	rtt    time.Duration // between the primary and the standby; 0: loopback
	// hostDies: the primary's host dies (pgPair.HostDies) rather than
	// its process alone, isolated after it lost its standby (a partition,
	// the primary serving its clients meanwhile, until the HA manager
	// fences it). It needs an rtt.
	hostDies bool
	isolated time.Duration
}

// Sizes of a failover run: failoverIDs messages, each delivered
// failoverCopies times by failoverProcs receivers (each with its own pool,
// as processes would be) of failoverWorkers workers each; the primary is
// killed once failoverKillAt messages had their effect.
const (
	failoverIDs     = 1200
	failoverCopies  = 3
	failoverProcs   = 2
	failoverWorkers = 4
	failoverKillAt  = failoverIDs / 3
)

// failoverRun is what a failover run saw.
type failoverRun struct {
	doubles []string // messages whose effect happened more than once
	lost    []string // messages acknowledged whose effect never happened
	// wrong lists deliveries settled wrongly: a done status with an error
	// or a Problem, a duplicate replaying another value, a dead letter.
	wrong       []string
	unsettled   int           // copies neither acked nor dead-lettered at the end
	unavailable int           // deliveries refused for want of the store (fail-closed)
	inFlight    int           // deliveries answered in-flight
	takeovers   int           // handler runs on a claim taken over (attempt above 1)
	failover    time.Duration // from the kill until the standby was promoted
	completed   int           // completed records on the new primary
	after       int           // effects after the promotion
	recovered   time.Duration // from the kill until every copy was settled
}

func (r *failoverRun) String() string {
	return fmt.Sprintf("doubles %d, lost %d, wrongly settled %d, unsettled %d; refused while unavailable %d, in-flight answers %d, claims taken over %d; kill to promoted %v, to all settled %v; effects after the promotion %d",
		len(r.doubles), len(r.lost),
		len(r.wrong), r.unsettled, r.unavailable, r.inFlight, r.takeovers,
		r.failover.Round(time.Millisecond), r.recovered.Round(time.Millisecond), r.after)
}

// TestFailoverSynchronousStandby: a stream of messages, each delivered
// three times by eight workers in two processes through receivers on
// pgstore, with the default lease. In the middle of it, the primary loses
// its synchronous standby (2ms away, another zone; what was in flight
// between them is lost) and goes on serving its clients for 200ms; then
// its host dies (pgPair.HostDies): the clients hear nothing more from it,
// and the server is killed (pg_ctl stop -m immediate). The standby is
// promoted. The clients find the new primary by themselves: their
// connection string lists both servers with
// target_session_attrs=read-write, and a connection attempt gives up on
// the silent host after its connect timeout. No message has its effect
// twice, none is lost, every copy is acknowledged, no done status carries
// an error, and the new primary holds every message's record completed.
func TestFailoverSynchronousStandby(t *testing.T) {
	if testing.Short() {
		t.Skip("a slow fault test (a server or process killed or restarted): skipped under -short")
	}
	t.Parallel()
	run := runFailover(t, failoverCase{mode: synchronous, rtt: 2 * time.Millisecond, hostDies: true, isolated: 200 * time.Millisecond})
	t.Log(run)
	for what, list := range map[string][]string{
		"messages had their effect twice":        run.doubles,
		"messages were acknowledged, never done": run.lost,
		"deliveries were settled wrongly":        run.wrong,
	} {
		if len(list) > 0 {
			t.Errorf("%d %s; the first: %s", len(list), what, strings.Join(list[:min(len(list), 10)], "; "))
		}
	}
	require.Zero(t, run.unsettled, "copies never settled")
	require.Positive(t, run.unavailable, "no delivery saw the primary gone: the kill was not mid-stream")
	require.Positive(t, run.after, "no effect after the promotion")
	require.Equal(t, failoverIDs, run.completed, "completed records on the new primary")
}

// runFailover runs one failover of c and reports what it saw. It fails t
// only when the machinery breaks (a server that does not start); what
// the receivers did is for the caller to judge.
func runFailover(t *testing.T, c failoverCase) *failoverRun {
	t.Helper()
	pair := startPair(t, c.mode, c.rtt)
	dsn := pair.DSN()
	// Every wait is bounded. An orphaned claim (one whose commit reached
	// the standby while its answer was lost with the primary) is taken
	// over once its lease ends, and a copy that found it held just then
	// may wait most of another lease: the receiver's in-flight waits keep
	// doubling across the change of holder. So the run may take two
	// leases beyond the failover, and no more.
	lease := c.lease
	if lease == 0 {
		lease = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(t.Context(), c.detect+2*lease+30*time.Second)
	defer cancel()

	var effects deduptest.Effects
	handler := func(ctx context.Context, id string) (string, error) {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		effects.Record(id)
		return id, nil
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var rcvs []*dedup.Receiver[string, string]
	for range failoverProcs {
		s := newStore(t, failoverPool(t, dsn), "dedup_records", nil)
		rcv, err := dedup.NewReceiver(s, func(id string) (string, error) { return id, nil }, handler, &dedup.Config{
			Namespace: "failover", Lease: c.lease, StoreRetryDelay: time.Second, Logger: quiet,
		})
		require.NoError(t, err)
		rcvs = append(rcvs, rcv)
	}

	if pair.front != nil {
		// Before the pools close (cleanups run last first): a pool waits
		// up to 15s for each connection to a silent server to close.
		t.Cleanup(pair.front.Cut)
	}

	ids := make([]string, failoverIDs)
	for i := range ids {
		ids[i] = fmt.Sprintf("m%04d", i)
	}
	b := newFailoverBroker(ids)
	run := &failoverRun{}
	var wg sync.WaitGroup
	for p, rcv := range rcvs {
		for w := range failoverWorkers {
			wg.Go(func() { b.work(ctx, rcv, run, fmt.Sprintf("worker %d.%d", p, w)) })
		}
	}
	defer func() {
		cancel()
		wg.Wait()
	}()

	for effects.Len() < failoverKillAt {
		if ctx.Err() != nil {
			t.Fatalf("only %d of %d messages had their effect before the timeout, the primary still up", effects.Len(), failoverKillAt)
		}
		time.Sleep(time.Millisecond)
	}
	killed := time.Now()
	if c.hostDies {
		pair.Isolate()
		time.Sleep(c.isolated)
		pair.HostDies()
	} else {
		pair.primary.Kill()
	}
	time.Sleep(c.detect)
	pair.standby.Promote()
	run.failover = time.Since(killed)
	before := effects.Len()

	select {
	case <-b.settled:
		run.recovered = time.Since(killed)
	case <-ctx.Done():
	}
	cancel()
	wg.Wait()
	run.after = effects.Len() - before
	for _, p := range effects.ExactlyOnce(ids...).Problems {
		switch {
		case p.Kind == deduptest.DoubleEffect:
			run.doubles = append(run.doubles, p.String())
		case p.Kind == deduptest.NoEffect && b.wasAcked(p.ID):
			run.lost = append(run.lost, p.ID)
		}
	}
	run.unsettled = b.left()

	check, err := pgxpool.New(context.Background(), pair.standby.DSN())
	require.NoError(t, err)
	defer check.Close()
	qctx, qcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer qcancel()
	require.NoError(t, check.QueryRow(qctx, "SELECT count(*) FROM dedup_records WHERE state = 'completed'").Scan(&run.completed))
	return run
}

// failoverPool is a client process's pool, configured for a failover:
//
//   - a connect timeout, which bounds each server's attempt: without one,
//     a new connection waits on a dead server for as long as the operating
//     system tries (about two minutes on Linux; here, for ever) before it
//     tries the next, and the pool finds no primary meanwhile;
//   - twice as many connections as the process has workers: when a
//     statement times out against a server that went silent, pgx closes
//     its connection in the background for up to 15s (a cancel request to
//     that server, then a wait for its goodbye), and the connection keeps
//     its place in the pool meanwhile; without room for new connections,
//     the pool reaches the new primary only once those places are freed.
func failoverPool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns = 2 * failoverWorkers
	cfg.ConnConfig.ConnectTimeout = pgstore.DefaultTimeout
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// failoverBroker holds the copies of the messages of a failover run, each
// due for (re)delivery at a time, as a broker does.
type failoverBroker struct {
	mu      sync.Mutex
	queue   dueQueue
	acked   map[string]bool
	pending int           // copies not settled yet
	settled chan struct{} // closed once every copy is
}

// newFailoverBroker queues failoverCopies copies of each id. The copies
// of an id are queued near each other (shuffled in windows of a few
// messages), so that they often run at once in different workers.
func newFailoverBroker(ids []string) *failoverBroker {
	b := &failoverBroker{settled: make(chan struct{}), acked: make(map[string]bool)}
	var all []string
	for _, id := range ids {
		for range failoverCopies {
			all = append(all, id)
		}
	}
	const window = 8 * failoverCopies
	for lo := 0; lo < len(all); lo += window {
		w := all[lo:min(lo+window, len(all))]
		rand.Shuffle(len(w), func(i, j int) { w[i], w[j] = w[j], w[i] })
	}
	now := time.Now()
	for i, id := range all {
		b.queue = append(b.queue, &dueCopy{id: id, seq: i, due: now})
	}
	heap.Init(&b.queue)
	b.pending = len(all)
	return b
}

// work delivers copies to rcv until every copy is settled or ctx ends.
func (b *failoverBroker) work(ctx context.Context, rcv *dedup.Receiver[string, string], run *failoverRun, name string) {
	for {
		c, ok := b.next(ctx)
		if !ok {
			return
		}
		res, err := rcv.Handle(ctx, c.id)
		if ctx.Err() != nil {
			return // the run is over; the copy stays unsettled
		}
		dec := adapter.Bind(rcv).Decide(res, err)
		b.mu.Lock()
		switch {
		case res.Status.Done() && (err != nil || res.Problem != nil):
			run.wrong = append(run.wrong, fmt.Sprintf("%s: %s: %s with error %v, problem %v", name, c.id, res.Status, err, res.Problem))
		case res.Status.Done() && res.Value != c.id:
			run.wrong = append(run.wrong, fmt.Sprintf("%s: %s: %s replayed %q", name, c.id, res.Status, res.Value))
		case dec.Action == delivery.DeadLetter:
			run.wrong = append(run.wrong, fmt.Sprintf("%s: %s: dead-lettered (%s): %v", name, c.id, dec.Reason, dec.Err))
		case errors.Is(err, dedup.ErrStoreUnavailable):
			run.unavailable++
		case res.Status == delivery.StatusInFlight:
			run.inFlight++
		case res.Status == delivery.StatusProcessed && res.Attempt > 1:
			run.takeovers++
		}
		if dec.Action == delivery.Ack {
			b.acked[c.id] = true
		}
		if dec.Action == delivery.Retry {
			c.due = time.Now().Add(dec.Delay)
			heap.Push(&b.queue, c)
		} else {
			b.pending--
			if b.pending == 0 {
				close(b.settled)
			}
		}
		b.mu.Unlock()
	}
}

// next takes the copy due first, waiting until it is due; false once
// every copy is settled or ctx ended.
func (b *failoverBroker) next(ctx context.Context) (*dueCopy, bool) {
	for {
		b.mu.Lock()
		if b.pending == 0 {
			b.mu.Unlock()
			return nil, false
		}
		wait := 5 * time.Millisecond // another worker's copy may come back
		if len(b.queue) > 0 {
			w := time.Until(b.queue[0].due)
			if w <= 0 {
				c := heap.Pop(&b.queue).(*dueCopy)
				b.mu.Unlock()
				return c, true
			}
			wait = min(wait, w)
		}
		b.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, false
		case <-time.After(wait):
		}
	}
}

// wasAcked reports whether a copy of id was acknowledged.
func (b *failoverBroker) wasAcked(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.acked[id]
}

// left is how many copies are not settled.
func (b *failoverBroker) left() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pending
}

// dueCopy is a copy of a message, due for delivery at due; seq keeps the
// queue's order among copies due at once.
type dueCopy struct {
	id  string
	seq int
	due time.Time
}

// dueQueue is a heap of copies, the one due first on top.
type dueQueue []*dueCopy

func (q dueQueue) Len() int { return len(q) }
func (q dueQueue) Less(i, j int) bool {
	if q[i].due.Equal(q[j].due) {
		return q[i].seq < q[j].seq
	}
	return q[i].due.Before(q[j].due)
}
func (q dueQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *dueQueue) Push(x any)   { *q = append(*q, x.(*dueCopy)) }
func (q *dueQueue) Pop() any {
	old := *q
	c := old[len(old)-1]
	*q = old[:len(old)-1]
	return c
}
