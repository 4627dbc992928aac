package mysqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/mysqlstore"
)

// TestRestartMidStream: a MariaDB of the test's own is killed (SIGKILL, as
// a crash) in the middle of a stream of payments, each delivered twice,
// and started again. One payment's transaction is in flight when the
// server dies. While it is down, every delivery is refused (fail-closed:
// the handler never runs) and retried; after the restart each payment is
// written exactly once, none is lost, and nothing is dead-lettered.
func TestRestartMidStream(t *testing.T) {
	if testing.Short() {
		t.Skip("a slow fault test (a server or process killed or restarted): skipped under -short")
	}
	t.Parallel()
	srv := startMariaDB(t)
	cfg := srv.Config()
	admin := open(t, cfg, 1)
	_, err := admin.Exec("CREATE DATABASE app")
	require.NoError(t, err)
	cfg.DBName = "app"
	db := open(t, cfg, 4)
	s := newStore(t, db, &mysqlstore.Options{Timeout: time.Second})
	ctx := t.Context()
	_, err = db.Exec("CREATE TABLE payments (payment_id VARCHAR(64) NOT NULL, amount INT NOT NULL, worker VARCHAR(32) NOT NULL DEFAULT '') ENGINE=InnoDB")
	require.NoError(t, err)

	const payments, killAfter, outage = 200, 150, 10
	down := false
	runs, runsWhileDown := map[string]int{}, 0
	inFlight, killed := make(chan struct{}), make(chan struct{})
	h := txHandler(t, s, func(ctx context.Context, tx *sql.Tx, p payment) (receipt, error) {
		runs[p.ID]++
		if down {
			runsWhileDown++
		}
		if err := insertPayment(ctx, tx, "payments", p, ""); err != nil {
			return receipt{}, err
		}
		if p.ID == "in-flight" && runs[p.ID] == 1 {
			close(inFlight)
			<-killed // the server dies before this transaction commits
		}
		return receipt{PaymentID: p.ID}, nil
	}, nil)
	rcv, err := dedup.NewReceiver(s, paymentID, h, &dedup.Config{Namespace: "pay", Lease: 2 * time.Second})
	require.NoError(t, err)

	var queue []pending
	for i := range payments {
		id := fmt.Sprintf("p%04d", i)
		queue = append(queue, pending{id: id}, pending{id: id})
	}
	rand.Shuffle(len(queue), func(i, j int) { queue[i], queue[j] = queue[j], queue[i] })
	queue = append(queue, pending{id: "in-flight"})

	acked := map[string]int{}
	var outageDecisions []delivery.Decision
	handle := func(d pending) {
		res, err := rcv.Handle(ctx, payment{ID: d.id, Amount: 1})
		dec := adapter.Bind(rcv).Decide(res, err)
		if down {
			outageDecisions = append(outageDecisions, dec)
		}
		switch dec.Action {
		case delivery.Ack:
			acked[d.id]++
		case delivery.Retry:
			queue = append(queue, pending{id: d.id, due: time.Now().Add(min(dec.Delay, 200*time.Millisecond))})
		case delivery.DeadLetter:
			t.Errorf("payment %s dead-lettered: %v", d.id, dec.Err)
		}
	}

	deadline := time.Now().Add(2 * time.Minute)
	for n := 0; len(queue) > 0; n++ {
		require.True(t, time.Now().Before(deadline), "%d deliveries left", len(queue))
		switch n {
		case killAfter:
			// The payment in flight holds its transaction open when the
			// server dies.
			done := make(chan struct{})
			d := queue[len(queue)-1]
			queue = queue[:len(queue)-1]
			go func() {
				defer close(done)
				handle(d)
			}()
			testenv.Recv(t, inFlight, "the payment in flight")
			srv.Kill()
			down = true
			close(killed)
			testenv.Recv(t, done, "the payment in flight to fail")
		case killAfter + outage:
			srv.Start()
			down = false
		}
		i := next(queue)
		if wait := time.Until(queue[i].due); wait > 0 {
			time.Sleep(wait)
		}
		d := queue[i]
		queue = append(queue[:i], queue[i+1:]...)
		handle(d)
	}

	require.Len(t, outageDecisions, outage+1, "the payment in flight and the deliveries during the outage")
	for _, d := range outageDecisions {
		require.Equal(t, delivery.Retry, d.Action, "a delivery during the outage: %v", d.Err)
	}
	for _, d := range outageDecisions[1:] {
		require.Equal(t, delivery.ReasonStoreUnavailable, d.Reason)
		require.ErrorIs(t, d.Err, dedup.ErrStoreUnavailable)
	}
	require.Zero(t, runsWhileDown, "a handler ran while the store was down (fail-closed)")
	require.Equal(t, 2, runs["in-flight"], "the payment whose transaction the crash rolled back runs again")

	var rows, distinct int
	require.NoError(t, db.QueryRow("SELECT COUNT(*), COUNT(DISTINCT payment_id) FROM payments").Scan(&rows, &distinct))
	require.Equal(t, payments+1, distinct, "payments lost")
	require.Equal(t, payments+1, rows, "payments written twice")
	for i := range payments {
		id := fmt.Sprintf("p%04d", i)
		require.Equal(t, 2, acked[id], "payment %s: both deliveries acked", id)
	}
	require.Equal(t, 1, acked["in-flight"])
	t.Logf("0 double, 0 lost: %d payments, each delivered twice, %d rows; the server killed with one transaction in flight, %d deliveries refused while it was down", payments+1, rows, len(outageDecisions))
}

// delivery is a message in the broker of TestRestartMidStream, due for
// (re)delivery at due.
type pending struct {
	id  string
	due time.Time
}

// next returns the index of the delivery due first.
func next(queue []pending) int {
	best := 0
	for i, d := range queue {
		if d.due.Before(queue[best].due) {
			best = i
		}
	}
	return best
}
