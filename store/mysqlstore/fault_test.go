package mysqlstore_test

import (
	"context"
	"database/sql"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/tcpproxy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/mysqlstore"
)

// TestNewUnavailable: a server that refuses connections, or accepts them
// and never answers, makes New fail with ErrUnavailable within
// Options.Timeout.
func TestNewUnavailable(t *testing.T) {
	t.Parallel()
	refused := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	for name, addr := range map[string]string{"Refused": refused, "Silent": testenv.SilentServer(t)} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := mysql.NewConfig()
			cfg.Net, cfg.Addr, cfg.User, cfg.DBName = "tcp", addr, "dedup", "dedup_test"
			db := open(t, cfg, 1)
			start := time.Now()
			_, err := mysqlstore.New(t.Context(), db, &mysqlstore.Options{Timeout: 300 * time.Millisecond})
			require.ErrorIs(t, err, store.ErrUnavailable)
			require.ErrorIs(t, err, dedup.ErrStoreUnavailable)
			require.Less(t, time.Since(start), testenv.WaitTimeout, "New must give up within its timeout, not hang")
		})
	}
}

// TestConnectionCut: once the connection to the server is cut, every call
// fails with an error matching ErrUnavailable (a *store.OpError naming the
// call), within Options.Timeout, and a receiver refuses its deliveries
// (fail-closed) without running the handler; with FailOpen, a TxHandler
// has no claim to complete, and the delivery is retried rather than run
// unprotected.
func TestConnectionCut(t *testing.T) {
	t.Parallel()
	d := newDB(t, 2)
	d.store(t, nil) // the table
	proxy := tcpproxy.Start(t, d.cfg.Addr)
	db := open(t, d.with(nil, func(c *mysql.Config) { c.Addr = proxy.Addr() }), 2)
	s := newStore(t, db, &mysqlstore.Options{Timeout: 500 * time.Millisecond})
	ctx := t.Context()
	c, err := s.Acquire(ctx, store.AcquireRequest{Key: "k", Lease: time.Minute})
	require.NoError(t, err)
	proxy.Cut()

	requireUnavailable := func(err error, op string) {
		t.Helper()
		require.ErrorIs(t, err, store.ErrUnavailable, op)
		var opErr *store.OpError
		require.ErrorAs(t, err, &opErr, op)
		require.Equal(t, op, opErr.Op)
	}
	_, err = s.Acquire(ctx, store.AcquireRequest{Key: "k2", Lease: time.Minute})
	requireUnavailable(err, "acquire")
	requireUnavailable(s.Extend(ctx, store.ExtendRequest{Key: "k", Token: c.Token, Lease: time.Minute}), "extend")
	requireUnavailable(s.Complete(ctx, store.CompleteRequest{Key: "k", Token: c.Token, Retention: time.Hour}), "complete")
	requireUnavailable(s.Release(ctx, store.ReleaseRequest{Key: "k", Token: c.Token, Retention: time.Hour}), "release")
	_, err = s.Get(ctx, "k")
	requireUnavailable(err, "get")
	requireUnavailable(s.Delete(ctx, "k"), "delete")
	_, _, err = s.DeleteIf(ctx, store.DeleteRequest{Key: "k"})
	requireUnavailable(err, "delete")
	for _, err := range s.Scan(ctx, "") {
		requireUnavailable(err, "scan")
	}
	_, err = s.Cleanup(ctx)
	requireUnavailable(err, "cleanup")
	for _, o := range s.AcquireBatch(ctx, []store.AcquireRequest{{Key: "a", Lease: time.Minute}, {Key: "b", Lease: time.Minute}}) {
		requireUnavailable(o.Err, "acquire")
	}
	for _, err := range s.CompleteBatch(ctx, []store.CompleteRequest{{Key: "k", Token: c.Token, Retention: time.Hour}}) {
		requireUnavailable(err, "complete")
	}
	for _, err := range s.ExtendBatch(ctx, []store.ExtendRequest{{Key: "k", Token: c.Token, Lease: time.Minute}}) {
		requireUnavailable(err, "extend")
	}

	ran := false
	rcv, err := dedup.NewReceiver(s, paymentID, func(context.Context, payment) (int, error) { ran = true; return 1, nil }, &dedup.Config{Namespace: "pay"})
	require.NoError(t, err)
	res, err := rcv.Handle(ctx, payment{ID: "p1"})
	dec := adapter.Bind(rcv).Decide(res, err)
	require.Equal(t, delivery.Retry, dec.Action)
	require.Equal(t, delivery.ReasonStoreUnavailable, dec.Reason)
	require.False(t, ran, "fail-closed: the handler must not run")

	h := txHandler(t, s, func(context.Context, *sql.Tx, payment) (int, error) { ran = true; return 1, nil }, nil)
	openRcv, err := dedup.NewReceiver(s, paymentID, h, &dedup.Config{Namespace: "pay", FailOpen: true})
	require.NoError(t, err)
	res, err = openRcv.Handle(ctx, payment{ID: "p1"})
	require.ErrorIs(t, err, mysqlstore.ErrNoClaim)
	require.Equal(t, delivery.Retry, adapter.Bind(openRcv).Decide(res, err).Action)
	require.False(t, ran)
}

// TestCallTimeoutBoundsALockWait: the store bounds its own calls by
// Options.Timeout (its CallTimeout): a completion and a release given a
// context without any deadline, whose row another transaction holds
// locked, fail with store.ErrUnavailable, saying so, rather than wait for
// the lock (innodb_lock_wait_timeout is 50 s). As with any timeout, the
// server may still carry the statement out once the lock is free; a
// Complete again then succeeds all the same.
func TestCallTimeoutBoundsALockWait(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	s := d.store(t, &mysqlstore.Options{Timeout: 300 * time.Millisecond})
	require.Equal(t, 300*time.Millisecond, s.CallTimeout())
	c, err := s.Acquire(t.Context(), store.AcquireRequest{Key: "k", Lease: time.Minute})
	require.NoError(t, err)

	tx, err := d.db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.Exec("SELECT 1 FROM dedup_records WHERE `key` = 'k' FOR UPDATE")
	require.NoError(t, err)

	done := make(chan error, 2)
	go func() {
		done <- s.Complete(context.Background(), store.CompleteRequest{Key: "k", Token: c.Token, Result: []byte("x"), Retention: time.Minute})
		done <- s.Release(context.Background(), store.ReleaseRequest{Key: "k", Token: c.Token, Retention: time.Minute})
	}()
	err = testenv.Recv(t, done, "Complete behind a held row lock to fail")
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.ErrorContains(t, err, "Options.Timeout")
	require.ErrorIs(t, testenv.Recv(t, done, "Release behind a held row lock to fail"), store.ErrUnavailable)
	require.NoError(t, tx.Rollback())

	require.NoError(t, s.Complete(t.Context(), store.CompleteRequest{Key: "k", Token: c.Token, Result: []byte("x"), Retention: time.Hour}))
	rec, err := s.Get(t.Context(), "k")
	require.NoError(t, err)
	require.Equal(t, store.StateCompleted, rec.State)
	require.Equal(t, "x", string(rec.Result))
}

// TestTxConnectionFailure: the database's connection breaking inside the
// handler's transaction (a reset during its statement, or the server
// killing its session) is the store being unavailable, not the handler
// failing: Handle's error matches ErrStoreUnavailable, Decide retries it
// as such (not counted towards MaxAttempts: with MaxAttempts 1 it is not
// dead-lettered), the claim's attempt is given back (the next delivery
// runs as attempt 1 again), and the business write is rolled back.
func TestTxConnectionFailure(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"reset", "killed"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			d := newDB(t, 4)
			d.store(t, nil) // the table
			payments := d.payments(t)
			proxy := tcpproxy.Start(t, d.cfg.Addr)
			db := open(t, d.with(nil, func(c *mysql.Config) { c.Addr = proxy.Addr() }), 4)
			s := newStore(t, db, nil)

			var first atomic.Bool
			broken := make(chan error, 1)
			h := txHandler(t, s, func(ctx context.Context, tx *sql.Tx, p payment) (receipt, error) {
				if err := insertPayment(ctx, tx, payments, p, "w"); err != nil {
					return receipt{}, err
				}
				if !first.CompareAndSwap(false, true) {
					return receipt{PaymentID: p.ID}, nil
				}
				var id int64
				if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
					return receipt{}, err
				}
				go func() { broken <- breakWhenSleeping(d, proxy, id, how) }()
				_, err := tx.ExecContext(ctx, "DO SLEEP(60)")
				return receipt{}, err
			}, nil)
			rcv, err := dedup.NewReceiver(s, paymentID, h, &dedup.Config{Namespace: "pay", MaxAttempts: 1})
			require.NoError(t, err)

			res, err := rcv.Handle(t.Context(), payment{ID: "p1", Amount: 1})
			require.NoError(t, testenv.Recv(t, broken, "the connection to break"))
			require.ErrorIs(t, err, dedup.ErrStoreUnavailable)
			require.ErrorIs(t, err, store.ErrUnavailable)
			dec := adapter.Bind(rcv).Decide(res, err)
			require.Equal(t, delivery.Retry, dec.Action, "%v", dec)
			require.Equal(t, delivery.ReasonStoreUnavailable, dec.Reason)
			require.Zero(t, d.count(t, "SELECT COUNT(*) FROM "+payments), "the broken transaction's write is rolled back")
			rec, err := s.Get(t.Context(), "pay:p1")
			require.NoError(t, err)
			require.Zero(t, rec.Attempt, "the attempt the database failed is given back")

			res, err = rcv.Handle(t.Context(), payment{ID: "p1", Amount: 1})
			require.NoError(t, err)
			require.Equal(t, delivery.StatusProcessed, res.Status)
			require.Equal(t, 1, res.Attempt, "the next claim runs as attempt 1 again")
			require.Equal(t, 1, d.count(t, "SELECT COUNT(*) FROM "+payments))
		})
	}
}

// breakWhenSleeping waits until the session id runs its SLEEP, then
// breaks it: how is "reset" (the proxy closes its connections; the
// session is then killed too, as the server would once it noticed) or
// "killed" (the server kills the session: KILL CONNECTION).
func breakWhenSleeping(d *testDB, proxy *tcpproxy.Proxy, id int64, how string) error {
	ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	for {
		var n int
		err := d.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ? AND INFO LIKE 'DO SLEEP%'", id).Scan(&n)
		if err != nil {
			return err
		}
		if n > 0 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	if how == "reset" {
		proxy.Reset()
	}
	_, err := d.db.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatInt(id, 10))
	return err
}

// TestTxHandlerOwnDeadline: a statement of the handler that its own
// deadline cancels (the driver closes the connection for it) is the
// handler's failure, as for any handler: not the store's outage, and its
// attempt counts.
func TestTxHandlerOwnDeadline(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	s := d.store(t, nil)
	h := txHandler(t, s, func(ctx context.Context, tx *sql.Tx, p payment) (receipt, error) {
		sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err := tx.ExecContext(sctx, "DO SLEEP(10)")
		return receipt{}, err
	}, nil)
	rcv, err := dedup.NewReceiver(s, paymentID, h, &dedup.Config{Namespace: "pay"})
	require.NoError(t, err)
	res, err := rcv.Handle(t.Context(), payment{ID: "p1"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, dedup.ErrStoreUnavailable)
	require.Equal(t, delivery.ReasonHandlerError, adapter.Bind(rcv).Decide(res, err).Reason)
	rec, err := s.Get(t.Context(), "pay:p1")
	require.NoError(t, err)
	require.Equal(t, 1, rec.Attempt)
}
