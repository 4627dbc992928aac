package pgstore_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/tcpproxy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/pgstore"
)

// lazyPool returns a pool on dsn that does not connect until it is used.
func lazyPool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// TestNewUnavailable: a PostgreSQL that refuses connections, or accepts
// them and never answers, makes New fail with ErrUnavailable within
// Options.Timeout, naming the server.
func TestNewUnavailable(t *testing.T) {
	t.Parallel()
	refused := "127.0.0.1:" + itoa(testenv.FreePort(t))
	for name, addr := range map[string]string{"Refused": refused, "Silent": testenv.SilentServer(t)} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool := lazyPool(t, "postgres://postgres@"+addr+"/test?sslmode=disable")
			_, err := pgstore.New(t.Context(), pool, &pgstore.Options{Timeout: 300 * time.Millisecond})
			require.ErrorIs(t, err, store.ErrUnavailable)
			require.ErrorIs(t, err, dedup.ErrStoreUnavailable)
			require.Contains(t, err.Error(), addr)
		})
	}
}

// TestConnectionCut: once the connection to PostgreSQL is cut, every call
// fails with an error matching ErrUnavailable (a *store.OpError naming the
// call), within Options.Timeout, and a receiver refuses its deliveries
// (fail-closed) without running the handler.
func TestConnectionCut(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	db.store(t, nil) // the table
	proxy := tcpproxy.Start(t, hostPortOf(t, db.dsn))
	pool := lazyPool(t, strings.Replace(db.dsn, hostPortOf(t, db.dsn), proxy.Addr(), 1))
	s, err := pgstore.New(t.Context(), pool, &pgstore.Options{Table: db.table("dedup_records"), Timeout: 500 * time.Millisecond})
	require.NoError(t, err)
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
	d := adapter.Bind(rcv).Decide(res, err)
	require.Equal(t, delivery.Retry, d.Action)
	require.Equal(t, delivery.ReasonStoreUnavailable, d.Reason)
	require.False(t, ran, "fail-closed: the handler must not run")

	// Fail-open runs the handler without a claim: a TxHandler has none to
	// complete, and the delivery is retried rather than run unprotected.
	h := txHandler(t, s, func(context.Context, pgx.Tx, payment) (int, error) { ran = true; return 1, nil }, nil)
	open, err := dedup.NewReceiver(s, paymentID, h, &dedup.Config{Namespace: "pay", FailOpen: true})
	require.NoError(t, err)
	res, err = open.Handle(ctx, payment{ID: "p1"})
	require.ErrorIs(t, err, pgstore.ErrNoClaim)
	require.Equal(t, delivery.Retry, adapter.Bind(open).Decide(res, err).Action)
	require.False(t, ran)
}

// TestTimeoutBoundsStatements: a statement that gets no answer in time (here
// it waits on a row lock that another transaction holds) fails with
// ErrUnavailable after Options.Timeout, saying so. As with any timeout,
// the server may still have carried it out; the receiver's retry of the
// completion then succeeds all the same.
func TestTimeoutBoundsStatements(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	s := db.store(t, &pgstore.Options{Timeout: 300 * time.Millisecond})
	ctx := t.Context()
	c, err := s.Acquire(ctx, store.AcquireRequest{Key: "k", Lease: time.Minute})
	require.NoError(t, err)

	tx, err := db.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, "SELECT FROM "+db.table("dedup_records")+" WHERE key = 'k' FOR UPDATE")
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		done <- s.Complete(ctx, store.CompleteRequest{Key: "k", Token: c.Token, Result: []byte("x"), Retention: time.Hour})
	}()
	err = testenv.Recv(t, done, "the Complete that waits on the lock to time out")
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.ErrorContains(t, err, "Options.Timeout")
	require.NoError(t, tx.Rollback(ctx))

	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "k", Token: c.Token, Result: []byte("x"), Retention: time.Hour}))
	rec, err := s.Get(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, store.StateCompleted, rec.State)
	require.Equal(t, "x", string(rec.Result))
}

// hostPortOf returns the host:port of a DSN.
func hostPortOf(t *testing.T, dsn string) string {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	return net.JoinHostPort(cfg.ConnConfig.Host, itoa(int(cfg.ConnConfig.Port)))
}

// TestCallTimeoutBoundsALockWait: the store bounds its own calls by
// Options.Timeout (its CallTimeout, which lets the receiver spend no timer
// of its own on completions): a completion and a release given a context
// without any deadline, whose row another transaction holds locked, fail
// with store.ErrUnavailable rather than wait for the lock.
func TestCallTimeoutBoundsALockWait(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	s := db.store(t, &pgstore.Options{Timeout: 300 * time.Millisecond})
	require.Equal(t, 300*time.Millisecond, s.CallTimeout())
	c, err := s.Acquire(t.Context(), store.AcquireRequest{Key: "k", Lease: time.Minute})
	require.NoError(t, err)

	tx, err := db.pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(t.Context(), "SELECT 1 FROM "+db.table("dedup_records")+" WHERE key = $1 FOR UPDATE", "k")
	require.NoError(t, err)

	done := make(chan error, 2)
	go func() {
		done <- s.Complete(context.Background(), store.CompleteRequest{Key: "k", Token: c.Token, Retention: time.Minute})
		done <- s.Release(context.Background(), store.ReleaseRequest{Key: "k", Token: c.Token, Retention: time.Minute})
	}()
	require.ErrorIs(t, testenv.Recv(t, done, "Complete behind a held row lock to fail"), store.ErrUnavailable)
	require.ErrorIs(t, testenv.Recv(t, done, "Release behind a held row lock to fail"), store.ErrUnavailable)
}
