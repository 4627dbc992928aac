package pgstore_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/pgstore"
)

// The environment of the consumer process that TestExactlyOnceKilled
// starts (this test binary again) and kills.
const (
	childEnv       = "PGSTORE_TEST_CHILD" // the kill point: one of killPoints
	childDSNEnv    = "PGSTORE_TEST_CHILD_DSN"
	childSchemaEnv = "PGSTORE_TEST_CHILD_SCHEMA"
	childMarker    = "PGSTORE-CHILD "
)

// killPoints are the moments of a transactional handler at which the
// consumer process is killed: before the business write, between the
// write and the completion of the record, between the completion and the
// commit, and after the commit (before the delivery is acknowledged).
var killPoints = []string{"before-write", "after-write", "after-complete", "after-commit"}

const (
	killLease      = time.Second
	killVisibility = 2 * time.Second
	killPayments   = 2000
	killCopies     = 3
	killWorkers    = 32
	killCycles     = 8
)

// receiverFor is the consumer of both processes: the same namespace and
// lease, so that either takes over what the other left.
func receiverFor(s *pgstore.Store, h dedup.Handler[payment, receipt]) (*dedup.Receiver[payment, receipt], error) {
	return dedup.NewReceiver(s, paymentID, h, &dedup.Config{Namespace: "pay", Lease: killLease, MaxAttempts: 20})
}

// TestExactlyOnceKilled: 2,000 payments delivered 3 times each, in random
// order, to 32 workers of this process and to a consumer process that is
// killed with SIGKILL at each of the kill points in turn (twice each),
// while the workers go on. The handler inserts into a table without a
// unique constraint and completes the record in the same transaction: the
// table ends with exactly one row per payment, none missing, and nothing
// is dead-lettered.
func TestExactlyOnceKilled(t *testing.T) {
	t.Parallel()
	db := newDB(t, 24)
	s := db.store(t, nil)
	table := db.payments(t)
	q := newQueue(t, db, killVisibility)

	h := txHandler(t, s, func(ctx context.Context, tx pgx.Tx, p payment) (receipt, error) {
		return receipt{PaymentID: p.ID, Worker: "parent"}, insertPayment(ctx, tx, table, p, "parent")
	}, nil)
	rcv, err := receiverFor(s, h)
	require.NoError(t, err)
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	consumed := make(chan error, 1)
	go func() { consumed <- q.consume(ctx, killWorkers, rcv) }()

	var deliveries []string
	for i := range killPayments {
		for range killCopies {
			deliveries = append(deliveries, fmt.Sprintf("pay-%04d", i))
		}
	}
	rand.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
	chunk := len(deliveries) / killCycles

	killed := map[string]int{}
	for c := range killCycles {
		point := killPoints[c%len(killPoints)]
		child := startChild(t, db, point)
		child.await(t, "ready")
		require.NoError(t, q.publish(t.Context(), deliveries[c*chunk:(c+1)*chunk]))
		child.await(t, "at "+point)
		child.kill(t)
		killed[point]++
	}
	require.NoError(t, q.publish(t.Context(), deliveries[killCycles*chunk:]))

	deadline := time.Now().Add(2 * time.Minute)
	for {
		n, err := q.pending(t.Context())
		require.NoError(t, err)
		if n == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "%d deliveries still pending", n)
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	require.NoError(t, testenv.Recv(t, consumed, "the workers to stop"))

	for _, p := range killPoints {
		require.Equal(t, 2, killed[p], "kills at %s", p)
	}
	require.Zero(t, db.count(t, "SELECT count(*) FROM "+q.dead), "dead letters")
	require.Equal(t, killPayments, db.count(t, "SELECT count(DISTINCT payment_id) FROM "+table), "payments missing")
	require.Equal(t, killPayments, db.count(t, "SELECT count(*) FROM "+table), "payments written more than once")
	require.Equal(t, killPayments, db.count(t, "SELECT count(*) FROM "+db.table("dedup_records")+" WHERE state = 'completed'"))
	require.Positive(t, db.count(t, "SELECT count(*) FROM "+table+" WHERE worker = 'child'"), "the consumer process wrote payments before it was killed")
	require.Positive(t, db.count(t, "SELECT count(*) FROM "+db.table("dedup_records")+" WHERE attempt > 1"), "killed claims were taken over")
}

// child is a consumer process of TestExactlyOnceKilled.
type child struct {
	cmd   *exec.Cmd
	lines chan string
	wg    sync.WaitGroup
}

func startChild(t *testing.T, db *testDB, point string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledConsumerChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+point, childDSNEnv+"="+db.dsn, childSchemaEnv+"="+db.schema)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, lines: make(chan string, 16)}
	c.wg.Go(func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), childMarker); ok {
				c.lines <- line
			}
		}
	})
	t.Cleanup(func() { c.kill(t) })
	return c
}

// await waits for the child to report what.
func (c *child) await(t *testing.T, what string) {
	t.Helper()
	for {
		// A closed channel gives "": the process ended.
		line := testenv.Recv(t, c.lines, "the consumer process to report "+what)
		require.NotEmpty(t, line, "the consumer process ended before it reported %s", what)
		if strings.HasPrefix(line, what) {
			return
		}
	}
}

// kill kills the child with SIGKILL and reaps it.
func (c *child) kill(t *testing.T) {
	t.Helper()
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	c.wg.Wait()
	_ = c.cmd.Wait()
}

// TestKilledConsumerChild is the consumer process of TestExactlyOnceKilled
// (it skips unless that test started it). Its handler does what TxHandler
// does, step by step, and at the kill point of its first message it
// reports where it is and stops there until it is killed.
func TestKilledConsumerChild(t *testing.T) {
	point := os.Getenv(childEnv)
	if point == "" {
		t.Skip("the consumer process of TestExactlyOnceKilled")
	}
	// Should the test that kills it die first, it does not outlive it long.
	time.AfterFunc(testenv.WaitTimeout*4, func() { os.Exit(3) })
	ctx := context.Background()
	pool := connect(t, os.Getenv(childDSNEnv), 6)
	schema := os.Getenv(childSchemaEnv)
	s, err := pgstore.New(ctx, pool, &pgstore.Options{Table: schema + ".dedup_records"})
	require.NoError(t, err)
	table := schema + ".payments"

	var once sync.Once
	stopHere := func(at string) {
		if at != point {
			return
		}
		once.Do(func() {
			fmt.Printf("%sat %s\n", childMarker, at)
			select {} // until killed
		})
	}
	rcv, err := receiverFor(s, func(ctx context.Context, p payment) (receipt, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return receipt{}, err
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		stopHere("before-write")
		if err := insertPayment(ctx, tx, table, p, "child"); err != nil {
			return receipt{}, err
		}
		stopHere("after-write")
		r := receipt{PaymentID: p.ID, Worker: "child"}
		if err := s.CompleteTx(ctx, tx, []byte(fmt.Sprintf(`{"PaymentID":%q,"Worker":"child"}`, p.ID))); err != nil {
			return receipt{}, err
		}
		stopHere("after-complete")
		if err := tx.Commit(ctx); err != nil {
			return receipt{}, err
		}
		stopHere("after-commit")
		return r, nil
	})
	require.NoError(t, err)
	fmt.Printf("%sready\n", childMarker)
	_ = attach(pool, schema, killVisibility).consume(ctx, 4, rcv)
}
