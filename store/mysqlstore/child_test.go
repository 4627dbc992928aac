package mysqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/mysqlstore"
)

// The environment of the consumer process that TestExactlyOnceKilled
// starts (this test binary again) and kills.
const (
	childEnv    = "MYSQLSTORE_TEST_CHILD" // the kill point: one of killPoints
	childDSNEnv = "MYSQLSTORE_TEST_CHILD_DSN"
	childMarker = "MYSQLSTORE-CHILD "
)

// killPoints are the moments of a transactional handler at which the
// consumer process is killed: before the business write, between the
// write and the completion of the record, between the completion and the
// commit, and after the commit (before the delivery is acknowledged).
var killPoints = []string{"before-write", "after-write", "after-complete", "after-commit"}

const (
	killLease      = time.Second
	killVisibility = 2 * time.Second
	killPayments   = 3000
	killCopies     = 3
	killWorkers    = 32
	killCycles     = 5
)

// receiverFor is the consumer of both processes: the same namespace and
// lease, so that either takes over what the other left.
func receiverFor(s *mysqlstore.Store, h dedup.Handler[payment, receipt]) (*dedup.Receiver[payment, receipt], error) {
	return dedup.NewReceiver(s, paymentID, h, &dedup.Config{Namespace: "pay", Lease: killLease, MaxAttempts: 20})
}

// TestExactlyOnceKilled: 3,000 payments delivered 3 times each, in random
// order, to 32 workers of this process and to a consumer process that is
// killed with SIGKILL 5 times, at each of the kill points in turn, while
// the workers go on. The handler inserts into a table without a unique key
// and completes the record in the same transaction: the table ends with
// exactly one row per payment, none missing, and nothing is dead-lettered.
func TestExactlyOnceKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("a slow fault test (a server or process killed or restarted): skipped under -short")
	}
	t.Parallel()
	d := newDB(t, killWorkers+4)
	s := d.store(t, nil)
	table := d.payments(t)
	q := newQueue(t, d, d.db, killVisibility)

	h := txHandler(t, s, func(ctx context.Context, tx *sql.Tx, p payment) (receipt, error) {
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
	chunk := len(deliveries) / (killCycles + 1)

	start := time.Now()
	killed := map[string]int{}
	for c := range killCycles {
		point := killPoints[c%len(killPoints)]
		began := time.Now()
		child := startChild(t, d, point)
		child.Await(t, "ready")
		ready := time.Since(began)
		require.NoError(t, publishAll(bounded(t), q, deliveries[c*chunk:(c+1)*chunk]))
		published := time.Since(began)
		child.Await(t, "at "+point)
		child.Kill(t)
		t.Logf("cycle %d: the consumer process ready after %v, the deliveries published after %v, killed at %s after %v",
			c, ready.Round(time.Millisecond), published.Round(time.Millisecond), point, time.Since(began).Round(time.Millisecond))
		killed[point]++
	}
	require.NoError(t, publishAll(bounded(t), q, deliveries[killCycles*chunk:]))

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
	t.Logf("%d deliveries of %d payments, the consumer process killed %d times: %v", len(deliveries), killPayments, killCycles, time.Since(start).Round(time.Millisecond))

	for _, p := range killPoints {
		require.Positive(t, killed[p], "kills at %s", p)
	}
	require.Zero(t, d.count(t, "SELECT COUNT(*) FROM dead_letters"), "dead letters")
	require.Equal(t, killPayments, d.count(t, "SELECT COUNT(DISTINCT payment_id) FROM "+table), "payments missing")
	require.Equal(t, killPayments, d.count(t, "SELECT COUNT(*) FROM "+table), "payments written more than once")
	require.Equal(t, killPayments, d.count(t, "SELECT COUNT(*) FROM dedup_records WHERE state = 'completed'"))
	require.Positive(t, d.count(t, "SELECT COUNT(*) FROM "+table+" WHERE worker = 'child'"), "the consumer process wrote payments before it was killed")
	require.Positive(t, d.count(t, "SELECT COUNT(*) FROM dedup_records WHERE attempt > 1"), "killed claims were taken over")
}

// publishAll publishes ids in statements of 1,000.
func publishAll(ctx context.Context, q *queue, ids []string) error {
	for len(ids) > 0 {
		n := min(len(ids), 1000)
		if err := q.publish(ctx, ids[:n]); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

// startChild starts a consumer process of TestExactlyOnceKilled, which
// stops at point.
func startChild(t *testing.T, d *testDB, point string) *testenv.Child {
	t.Helper()
	return testenv.StartChild(t, "^TestKilledConsumerChild$", []string{childEnv + "=" + point, childDSNEnv + "=" + d.cfg.FormatDSN()}, childMarker)
}

// TestKilledConsumerChild is the consumer process of TestExactlyOnceKilled
// (it skips unless that test started it). Its handler does what TxHandler
// does, step by step, and at the kill point of its first message it
// reports where it is and stops there until it is killed.
func TestKilledConsumerChild(t *testing.T) {
	if testing.Short() {
		t.Skip("a slow fault test (a server or process killed or restarted): skipped under -short")
	}
	point := os.Getenv(childEnv)
	if point == "" {
		t.Skip("the consumer process of TestExactlyOnceKilled")
	}
	// Should the test that kills it die first, it does not outlive it.
	testenv.ExitWithParent()
	ctx := context.Background()
	cfg, err := mysql.ParseDSN(os.Getenv(childDSNEnv))
	require.NoError(t, err)
	db := open(t, cfg, 6)
	s, err := mysqlstore.New(ctx, db, nil)
	require.NoError(t, err)

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
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return receipt{}, err
		}
		defer func() { _ = tx.Rollback() }()
		stopHere("before-write")
		if err := insertPayment(ctx, tx, "payments", p, "child"); err != nil {
			return receipt{}, err
		}
		stopHere("after-write")
		r := receipt{PaymentID: p.ID, Worker: "child"}
		if err := s.CompleteTx(ctx, tx, []byte(fmt.Sprintf(`{"PaymentID":%q,"Worker":"child"}`, p.ID))); err != nil {
			return receipt{}, err
		}
		stopHere("after-complete")
		if err := tx.Commit(); err != nil {
			return receipt{}, err
		}
		stopHere("after-commit")
		return r, nil
	})
	require.NoError(t, err)
	fmt.Printf("%sready\n", childMarker)
	_ = (&queue{db: db, visibility: killVisibility}).consume(ctx, 4, rcv)
}

// bounded is t's context, ended after testenv.WaitTimeout: a publish that
// waits longer fails the test rather than hanging it.
func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	t.Cleanup(cancel)
	return ctx
}
