package pgstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
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
	if testing.Short() {
		t.Skip("a slow fault test (a server or process killed or restarted): skipped under -short")
	}
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
		began := time.Now()
		child := startChild(t, db, point)
		child.Await(t, "ready")
		ready := time.Since(began)
		require.NoError(t, q.publish(bounded(t), deliveries[c*chunk:(c+1)*chunk]))
		published := time.Since(began)
		child.Await(t, "at "+point)
		child.Kill(t)
		t.Logf("cycle %d: the consumer process ready after %v, the deliveries published after %v, killed at %s after %v",
			c, ready.Round(time.Millisecond), published.Round(time.Millisecond), point, time.Since(began).Round(time.Millisecond))
		killed[point]++
	}
	require.NoError(t, q.publish(bounded(t), deliveries[killCycles*chunk:]))

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

// startChild starts a consumer process of TestExactlyOnceKilled, which
// stops at point.
func startChild(t *testing.T, db *testDB, point string) *testenv.Child {
	t.Helper()
	return testenv.StartChild(t, "^TestKilledConsumerChild$", []string{childEnv + "=" + point, childDSNEnv + "=" + db.dsn, childSchemaEnv + "=" + db.schema}, childMarker)
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

// bounded is t's context, ended after testenv.WaitTimeout: a publish that
// waits longer fails the test rather than hanging it.
func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	t.Cleanup(cancel)
	return ctx
}
