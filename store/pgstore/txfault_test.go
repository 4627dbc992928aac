package pgstore_test

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/pgstore"
)

// resetProxy forwards loopback TCP connections to a server; Reset closes
// those open, as a network reset would, and new ones are forwarded again.
type resetProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

// startResetProxy listens on a free loopback port and forwards to target,
// until t ends.
func startResetProxy(t *testing.T, target string) *resetProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &resetProxy{ln: ln, target: target}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		_ = p.ln.Close()
		p.Reset()
		testenv.Wait(t, &p.wg, "the proxy's goroutines to end")
	})
	return p
}

func (p *resetProxy) Addr() string { return p.ln.Addr().String() }

// Reset closes every connection forwarded so far.
func (p *resetProxy) Reset() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

func (p *resetProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Go(func() { _, _ = io.Copy(up, c); _ = up.Close() })
		p.wg.Go(func() { _, _ = io.Copy(c, up); _ = c.Close() })
	}
}

// TestTxConnectionFailure: the database's connection breaking inside the
// handler's transaction (a reset during its tx.Exec, or the server
// terminating its session) is the store being unavailable, not the
// handler failing: Handle's error matches ErrStoreUnavailable, Decide
// retries it as such (not counted towards MaxAttempts: with MaxAttempts 1
// it is not dead-lettered), the claim's attempt is given back (the next
// delivery runs as attempt 1 again), and the business write is rolled
// back.
func TestTxConnectionFailure(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"reset", "terminated"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			db := newDB(t, 4)
			db.store(t, nil) // the table
			payments := db.payments(t)
			proxy := startResetProxy(t, hostPortOf(t, db.dsn))
			cfg, err := pgxpool.ParseConfig(strings.Replace(db.dsn, hostPortOf(t, db.dsn), proxy.Addr(), 1))
			require.NoError(t, err)
			// Ping every connection the pool hands out, so that none that
			// the reset broke is used again.
			cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return true }
			pool, err := pgxPool(cfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			s, err := pgstore.New(t.Context(), pool, &pgstore.Options{Table: db.table("dedup_records")})
			require.NoError(t, err)

			var first atomic.Bool
			broken := make(chan error, 1)
			h := txHandler(t, s, func(ctx context.Context, tx pgx.Tx, p payment) (receipt, error) {
				if err := insertPayment(ctx, tx, payments, p, "w"); err != nil {
					return receipt{}, err
				}
				if !first.CompareAndSwap(false, true) {
					return receipt{PaymentID: p.ID}, nil
				}
				pid := tx.Conn().PgConn().PID()
				go func() { broken <- breakWhenSleeping(db, proxy, pid, how) }()
				_, err := tx.Exec(ctx, "SELECT pg_sleep(60)")
				return receipt{}, err
			}, nil)
			rcv, err := dedup.NewReceiver(s, paymentID, h, &dedup.Config{Namespace: "pay", MaxAttempts: 1})
			require.NoError(t, err)

			res, err := rcv.Handle(t.Context(), payment{ID: "p1", Amount: 1})
			require.NoError(t, testenv.Recv(t, broken, "the connection to break"))
			require.ErrorIs(t, err, dedup.ErrStoreUnavailable)
			require.ErrorIs(t, err, store.ErrUnavailable)
			d := adapter.Bind(rcv).Decide(res, err)
			require.Equal(t, delivery.Retry, d.Action, "%v", d)
			require.Equal(t, delivery.ReasonStoreUnavailable, d.Reason)
			require.Zero(t, db.count(t, "SELECT count(*) FROM "+payments), "the broken transaction's write is rolled back")
			rec, err := s.Get(t.Context(), "pay:p1")
			require.NoError(t, err)
			require.Zero(t, rec.Attempt, "the attempt the database failed is given back")

			res, err = rcv.Handle(t.Context(), payment{ID: "p1", Amount: 1})
			require.NoError(t, err)
			require.Equal(t, delivery.StatusProcessed, res.Status)
			require.Equal(t, 1, res.Attempt, "the next claim runs as attempt 1 again")
			require.Equal(t, 1, db.count(t, "SELECT count(*) FROM "+payments))
		})
	}
}

// breakWhenSleeping waits until the session pid runs pg_sleep, then
// breaks it: how is "reset" (the proxy closes its connections; the
// server's session is then terminated too, as the server would once it
// noticed) or "terminated" (the server terminates the session, SQLSTATE
// 57P01).
func breakWhenSleeping(db *testDB, proxy *resetProxy, pid uint32, how string) error {
	ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	for {
		var sleeping bool
		err := db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND query LIKE 'SELECT pg_sleep%')`, pid).Scan(&sleeping)
		if err != nil {
			return err
		}
		if sleeping {
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
	_, err := db.pool.Exec(ctx, "SELECT pg_terminate_backend($1)", pid)
	return err
}

// TestTxHandlerOwnDeadline: a statement of the handler that its own
// deadline cancels (pgx closes the connection for it) is the handler's
// failure, as for any handler: not the store's outage, and its attempt
// counts.
func TestTxHandlerOwnDeadline(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	s := db.store(t, nil)
	h := txHandler(t, s, func(ctx context.Context, tx pgx.Tx, p payment) (receipt, error) {
		sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err := tx.Exec(sctx, "SELECT pg_sleep(10)")
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
