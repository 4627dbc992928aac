package mysqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/mysqlstore"
)

// payment is the message of the transactional tests.
type payment struct {
	ID     string
	Amount int
}

func paymentID(p payment) (string, error) { return p.ID, nil }

// receipt is what the handler returns, and duplicates get back.
type receipt struct {
	PaymentID string
	Worker    string
}

// countingStore counts the completions the receiver asks for: with
// TxHandler there must be none, the handler's transaction completed the
// record.
type countingStore struct {
	*mysqlstore.Store
	completes atomic.Int64
}

func (c *countingStore) Complete(ctx context.Context, req store.CompleteRequest) error {
	c.completes.Add(1)
	return c.Store.Complete(ctx, req)
}

func (c *countingStore) CompleteBatch(ctx context.Context, reqs []store.CompleteRequest) []error {
	c.completes.Add(int64(len(reqs)))
	return c.Store.CompleteBatch(ctx, reqs)
}

// payments creates the business table of a test: no unique key, so only
// the record can keep a payment from being written twice.
func (d *testDB) payments(t testing.TB) string {
	t.Helper()
	d.exec(t, "CREATE TABLE payments (payment_id VARCHAR(64) NOT NULL, amount INT NOT NULL, worker VARCHAR(32) NOT NULL DEFAULT '') ENGINE=InnoDB")
	return "payments"
}

// insertPayment is the business write of the tests.
func insertPayment(ctx context.Context, tx *sql.Tx, table string, p payment, worker string) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (payment_id, amount, worker) VALUES (?, ?, ?)", p.ID, p.Amount, worker)
	return err
}

func txHandler[R any](t testing.TB, s *mysqlstore.Store, fn mysqlstore.TxFunc[payment, R], opts *mysqlstore.TxOptions) dedup.Handler[payment, R] {
	t.Helper()
	h, err := mysqlstore.TxHandler(s, fn, opts)
	require.NoError(t, err)
	return h
}

// TestTxHandlerCommitsTogether: the business row and the record commit in
// one transaction; the receiver does not complete the record again, and a
// duplicate gets the result stored by the transaction.
func TestTxHandlerCommitsTogether(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	s := d.store(t, nil)
	counted := &countingStore{Store: s}
	table := d.payments(t)
	rcv, err := dedup.NewReceiver(counted, paymentID, txHandler(t, s, func(ctx context.Context, tx *sql.Tx, p payment) (receipt, error) {
		return receipt{PaymentID: p.ID, Worker: "w1"}, insertPayment(ctx, tx, table, p, "w1")
	}, nil), &dedup.Config{Namespace: "pay"})
	require.NoError(t, err)

	res, err := rcv.Handle(t.Context(), payment{ID: "p1", Amount: 10})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)
	require.NoError(t, res.Problem)
	require.Zero(t, counted.completes.Load(), "the transaction completed the record: the receiver must not complete it again")

	rec, err := s.Get(t.Context(), "pay:p1")
	require.NoError(t, err)
	require.Equal(t, store.StateCompleted, rec.State)
	require.JSONEq(t, `{"PaymentID":"p1","Worker":"w1"}`, string(rec.Result))

	dup, err := rcv.Handle(t.Context(), payment{ID: "p1", Amount: 10})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusDuplicate, dup.Status)
	require.Equal(t, receipt{PaymentID: "p1", Worker: "w1"}, dup.Value)
	require.Equal(t, 1, d.count(t, "SELECT COUNT(*) FROM "+table))

	// HandleBatch: every message its own transaction, none completed again.
	msgs := []payment{{"b1", 1}, {"b2", 2}, {"b1", 1}, {"b3", 3}, {"p1", 10}}
	out := rcv.HandleBatch(t.Context(), msgs)
	for i, o := range out {
		require.NoError(t, o.Err, "message %d", i)
		require.True(t, o.Result.Status.Done(), "message %d: %v", i, o.Result.Status)
	}
	require.Zero(t, counted.completes.Load(), "HandleBatch completed records the transactions had completed")
	require.Equal(t, 4, d.count(t, "SELECT COUNT(*) FROM "+table))
	require.Equal(t, 4, d.count(t, "SELECT COUNT(DISTINCT payment_id) FROM "+table))
}

// TestTxHandlerRollsBackOnError: a handler error rolls its business write
// back and releases the claim; the retry writes once.
func TestTxHandlerRollsBackOnError(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	s := d.store(t, nil)
	table := d.payments(t)
	var runs atomic.Int64
	rcv, err := dedup.NewReceiver(s, paymentID, txHandler(t, s, func(ctx context.Context, tx *sql.Tx, p payment) (receipt, error) {
		if err := insertPayment(ctx, tx, table, p, ""); err != nil {
			return receipt{}, err
		}
		if runs.Add(1) == 1 {
			return receipt{}, errors.New("gateway timeout")
		}
		return receipt{PaymentID: p.ID}, nil
	}, nil), &dedup.Config{Namespace: "pay"})
	require.NoError(t, err)

	_, err = rcv.Handle(t.Context(), payment{ID: "p1", Amount: 5})
	require.ErrorContains(t, err, "gateway timeout")
	require.Zero(t, d.count(t, "SELECT COUNT(*) FROM "+table), "the failed attempt's write must be rolled back")
	rec, err := s.Get(t.Context(), "pay:p1")
	require.NoError(t, err)
	require.Equal(t, store.StateFailed, rec.State)
	require.Contains(t, rec.LastError, "gateway timeout")

	res, err := rcv.Handle(t.Context(), payment{ID: "p1", Amount: 5})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)
	require.Equal(t, 2, res.Attempt)
	require.Equal(t, 1, d.count(t, "SELECT COUNT(*) FROM "+table))
}

// TestStaleWorkerRollsBack: a worker whose lease ended and whose key
// another delivery took over and completed fails its transactional
// completion with ErrLeaseLost; its business write is rolled back, and the
// receiver retries its message as in flight elsewhere. It holds under
// both isolation levels.
func TestStaleWorkerRollsBack(t *testing.T) {
	t.Parallel()
	for _, iso := range []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelReadCommitted} {
		t.Run(iso.String(), func(t *testing.T) {
			t.Parallel()
			d := newDB(t, 4)
			s := d.store(t, nil)
			table := d.payments(t)
			opts := &mysqlstore.TxOptions{Tx: sql.TxOptions{Isolation: iso}}
			inserted, resume := make(chan store.Token, 1), make(chan struct{})
			// The stale worker's receiver runs on a clock that never moves, so
			// its heartbeat never extends the lease and never gives it up: only
			// the database's clock ends it.
			stale, err := dedup.NewReceiver(s, paymentID, txHandler(t, s, func(ctx context.Context, tx *sql.Tx, p payment) (receipt, error) {
				if err := insertPayment(ctx, tx, table, p, "stale"); err != nil {
					return receipt{}, err
				}
				held, _ := store.ClaimFromContext(ctx)
				inserted <- held.Token
				<-resume
				return receipt{PaymentID: p.ID, Worker: "stale"}, nil
			}, opts), &dedup.Config{Namespace: "pay", Lease: 300 * time.Millisecond, Clock: clock.NewFake(time.Now())})
			require.NoError(t, err)
			fresh, err := dedup.NewReceiver(s, paymentID, txHandler(t, s, func(ctx context.Context, tx *sql.Tx, p payment) (receipt, error) {
				return receipt{PaymentID: p.ID, Worker: "fresh"}, insertPayment(ctx, tx, table, p, "fresh")
			}, opts), &dedup.Config{Namespace: "pay"})
			require.NoError(t, err)

			type outcome struct {
				res dedup.Result[receipt]
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := stale.Handle(context.Background(), payment{ID: "p1", Amount: 7})
				done <- outcome{res, err}
			}()
			staleToken := testenv.Recv(t, inserted, "the stale worker's business write")
			rec, err := s.Get(t.Context(), "pay:p1")
			require.NoError(t, err)
			waitDBTime(t, d.db, rec.LeaseUntil)

			res, err := fresh.Handle(t.Context(), payment{ID: "p1", Amount: 7})
			require.NoError(t, err)
			require.Equal(t, delivery.StatusProcessed, res.Status, "the ended lease is taken over")
			require.Equal(t, 2, res.Attempt)

			close(resume)
			o := testenv.Recv(t, done, "the stale worker's Handle")
			require.ErrorIs(t, o.err, dedup.ErrLeaseLost, "the stale worker's completion must fail with ErrLeaseLost")
			require.Equal(t, delivery.Retry, adapter.Bind(stale).Decide(o.res, o.err).Action)
			require.Equal(t, delivery.ReasonInFlight, adapter.Bind(stale).Decide(o.res, o.err).Reason)

			require.Equal(t, 1, d.count(t, "SELECT COUNT(*) FROM "+table), "the stale worker's write must be rolled back")
			require.Equal(t, 1, d.count(t, "SELECT COUNT(*) FROM "+table+" WHERE worker = 'fresh'"))
			rec, err = s.Get(t.Context(), "pay:p1")
			require.NoError(t, err)
			require.Equal(t, store.StateCompleted, rec.State)
			require.JSONEq(t, `{"PaymentID":"p1","Worker":"fresh"}`, string(rec.Result))
			require.ErrorIs(t, s.Release(t.Context(), store.ReleaseRequest{Key: "pay:p1", Token: staleToken, Error: "x", Retention: time.Hour}), store.ErrLeaseLost)
		})
	}
}

// TestTakeoverWaitsForCommit: while a transaction holds the row it
// completed, a delivery that tries to take the ended lease over waits for
// the commit (on the row lock), then finds the record completed. Under
// REPEATABLE READ, InnoDB's default, too: the claim reads the row it
// locks, not its snapshot. A completion in the same transaction again
// changes nothing.
func TestTakeoverWaitsForCommit(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	s := d.store(t, nil)
	table := d.payments(t)
	ctx := t.Context()
	key := "pay:p1"
	c, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: 200 * time.Millisecond})
	require.NoError(t, err)
	require.True(t, c.Acquired)
	held := &store.HeldClaim{Key: key, Token: c.Token, Attempt: 1, Retention: time.Hour}
	hctx := store.ContextWithClaim(ctx, held)

	tx, err := d.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	require.NoError(t, insertPayment(ctx, tx, table, payment{ID: "p1", Amount: 1}, "holder"))
	require.NoError(t, s.CompleteTx(hctx, tx, []byte(`"r1"`)))
	require.True(t, held.Completed(), "CompleteTx marks the claim completed")
	require.NoError(t, s.CompleteTx(hctx, tx, []byte(`"again"`)), "completing again in the same transaction changes nothing")
	waitDBTime(t, d.db, c.Record.LeaseUntil)

	type outcome struct {
		c   store.Claim
		err error
	}
	taken := make(chan outcome, 1)
	go func() {
		c, err := s.Acquire(context.Background(), store.AcquireRequest{Key: key, Lease: time.Minute})
		taken <- outcome{c, err}
	}()
	// The takeover waits on the row lock of the completing transaction.
	deadline := time.Now().Add(testenv.WaitTimeout)
	for lockWaits(t, d) == 0 {
		require.True(t, time.Now().Before(deadline), "the takeover never waited for the row lock")
		select {
		case o := <-taken:
			t.Fatalf("the takeover did not wait for the completing transaction: %+v, %v", o.c, o.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	require.NoError(t, tx.Commit())
	o := testenv.Recv(t, taken, "the takeover after the commit")
	require.NoError(t, o.err)
	require.False(t, o.c.Acquired, "the record completed in the transaction must not be taken over")
	require.Equal(t, store.StateCompleted, o.c.Record.State)
	require.Equal(t, `"r1"`, string(o.c.Record.Result))
	require.Equal(t, 1, d.count(t, "SELECT COUNT(*) FROM "+table))
}

// lockWaits counts the transactions waiting for a row lock of the test's
// database, as SHOW ENGINE INNODB STATUS lists them (information_schema's
// INNODB_TRX is a cache that tests polling it at once could keep stale).
func lockWaits(t testing.TB, d *testDB) int {
	t.Helper()
	var typ, name, status string
	require.NoError(t, d.db.QueryRow("SHOW ENGINE INNODB STATUS").Scan(&typ, &name, &status))
	n := 0
	lines := strings.Split(status, "\n")
	for i, line := range lines {
		if strings.Contains(line, "FOR THIS LOCK TO BE GRANTED") && i+1 < len(lines) && strings.Contains(lines[i+1], "`"+d.name+"`.") {
			n++
		}
	}
	return n
}

// TestTxDeadlockRetried: two handlers that update two rows of a business
// table in opposite orders deadlock; InnoDB rolls one transaction back
// (error 1213) and TxHandler runs its function again, as the store's
// problem, not the handler's: both messages are processed, each written
// once, with no handler error.
func TestTxDeadlockRetried(t *testing.T) {
	t.Parallel()
	d := newDB(t, 6)
	s := d.store(t, nil)
	table := d.payments(t)
	d.exec(t, "CREATE TABLE accounts (id INT PRIMARY KEY, balance INT NOT NULL) ENGINE=InnoDB")
	d.exec(t, "INSERT INTO accounts VALUES (1, 0), (2, 0)")
	var (
		runs    atomic.Int64
		mu      sync.Mutex
		first   = map[string]bool{}
		bothIn  sync.WaitGroup
		waiting = make(chan struct{})
	)
	bothIn.Add(2)
	go func() { bothIn.Wait(); close(waiting) }()
	h := txHandler(t, s, func(ctx context.Context, tx *sql.Tx, p payment) (receipt, error) {
		runs.Add(1)
		a, b := 1, 2
		if p.ID == "p2" {
			a, b = 2, 1
		}
		if _, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + 1 WHERE id = ?", a); err != nil {
			return receipt{}, err
		}
		mu.Lock()
		once := !first[p.ID]
		first[p.ID] = true
		mu.Unlock()
		if once {
			bothIn.Done()
			<-waiting // each holds its first row: the second updates cross
		}
		if _, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + 1 WHERE id = ?", b); err != nil {
			return receipt{}, err
		}
		return receipt{PaymentID: p.ID}, insertPayment(ctx, tx, table, p, "")
	}, nil)
	rcv, err := dedup.NewReceiver(s, paymentID, h, &dedup.Config{Namespace: "pay"})
	require.NoError(t, err)
	retried := mysqlstore.Retried(s)
	errs := make(chan error, 2)
	for _, id := range []string{"p1", "p2"} {
		go func() {
			res, err := rcv.Handle(t.Context(), payment{ID: id, Amount: 1})
			if err == nil && res.Status != delivery.StatusProcessed {
				err = errors.New(res.Status.String())
			}
			errs <- err
		}()
	}
	require.NoError(t, testenv.Recv(t, errs, "the first payment"))
	require.NoError(t, testenv.Recv(t, errs, "the second payment"))
	require.EqualValues(t, 3, runs.Load(), "the deadlock's victim runs again, once")
	require.EqualValues(t, 1, mysqlstore.Retried(s)-retried)
	require.Equal(t, 2, d.count(t, "SELECT COUNT(*) FROM "+table))
	require.Equal(t, 4, d.count(t, "SELECT SUM(balance) FROM accounts"), "the victim's first update was rolled back")
	for _, id := range []string{"pay:p1", "pay:p2"} {
		rec, err := s.Get(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, store.StateCompleted, rec.State)
		require.Equal(t, 1, rec.Attempt)
	}
}

// TestTxLockWaitTimeoutRetried: a statement of the handler that waits for
// a lock past innodb_lock_wait_timeout (error 1205, which rolls back the
// statement only) rolls the whole transaction back, its earlier write
// included, and the function runs again once the lock is free. When the
// lock stays held past the retries, the error is the store's (it matches
// ErrStoreUnavailable and the claim's attempt is given back), not the
// handler's.
func TestTxLockWaitTimeoutRetried(t *testing.T) {
	t.Parallel()
	d := newDB(t, 6)
	s := d.store(t, nil)
	table := d.payments(t)
	d.exec(t, "CREATE TABLE accounts (id INT PRIMARY KEY, balance INT NOT NULL) ENGINE=InnoDB")
	d.exec(t, "INSERT INTO accounts VALUES (1, 0)")
	blocker, err := d.db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer func() { _ = blocker.Rollback() }()
	_, err = blocker.Exec("UPDATE accounts SET balance = 100 WHERE id = 1")
	require.NoError(t, err)

	var runs atomic.Int64
	fn := func(ctx context.Context, tx *sql.Tx, p payment) (receipt, error) {
		if runs.Add(1) == 2 && p.ID == "p1" {
			require.NoError(t, blocker.Rollback()) // the lock is free for the second run
		}
		if _, err := tx.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
			return receipt{}, err
		}
		if err := insertPayment(ctx, tx, table, p, ""); err != nil {
			return receipt{}, err
		}
		_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + 1 WHERE id = 1")
		return receipt{PaymentID: p.ID}, err
	}
	rcv, err := dedup.NewReceiver(s, paymentID, txHandler(t, s, fn, nil), &dedup.Config{Namespace: "pay"})
	require.NoError(t, err)
	res, err := rcv.Handle(t.Context(), payment{ID: "p1", Amount: 1})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)
	require.EqualValues(t, 2, runs.Load(), "a timeout in the first run, the lock freed for the second")
	require.Equal(t, 1, d.count(t, "SELECT COUNT(*) FROM "+table), "the timed-out runs' inserts were rolled back")

	// Held past the retries.
	blocker2, err := d.db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer func() { _ = blocker2.Rollback() }()
	_, err = blocker2.Exec("UPDATE accounts SET balance = 100 WHERE id = 1")
	require.NoError(t, err)
	runs.Store(10)
	rcv2, err := dedup.NewReceiver(s, paymentID, txHandler(t, s, fn, &mysqlstore.TxOptions{Retries: 1}), &dedup.Config{Namespace: "pay", MaxAttempts: 1})
	require.NoError(t, err)
	res, err = rcv2.Handle(t.Context(), payment{ID: "p2", Amount: 1})
	var myErr *mysql.MySQLError
	require.ErrorAs(t, err, &myErr)
	require.EqualValues(t, 1205, myErr.Number)
	require.ErrorIs(t, err, dedup.ErrStoreUnavailable)
	d2 := adapter.Bind(rcv2).Decide(res, err)
	require.Equal(t, delivery.Retry, d2.Action, "with MaxAttempts 1, a handler's own error would be dead-lettered")
	require.Equal(t, delivery.ReasonStoreUnavailable, d2.Reason)
	rec, err := s.Get(t.Context(), "pay:p2")
	require.NoError(t, err)
	require.Zero(t, rec.Attempt, "the attempt lock contention failed is given back")
	require.Equal(t, 1, d.count(t, "SELECT COUNT(*) FROM "+table))
}

// TestTxResults: what the transaction stores is what the receiver would
// have: the JSON of the value, nothing for a zero-size type, nothing (and
// a Problem) for a result over MaxResultSize.
func TestTxResults(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	s := d.store(t, nil)
	ctx := t.Context()

	empty, err := dedup.NewReceiver(s, paymentID, txHandler(t, s, func(context.Context, *sql.Tx, payment) (struct{}, error) {
		return struct{}{}, nil
	}, nil), &dedup.Config{Namespace: "empty"})
	require.NoError(t, err)
	_, err = empty.Handle(ctx, payment{ID: "p1"})
	require.NoError(t, err)
	rec, err := s.Get(ctx, "empty:p1")
	require.NoError(t, err)
	require.Equal(t, store.StateCompleted, rec.State)
	require.Empty(t, rec.Result)

	huge, err := dedup.NewReceiver(s, paymentID, txHandler(t, s, func(context.Context, *sql.Tx, payment) (string, error) {
		return strings.Repeat("x", (64 << 10)), nil
	}, nil), &dedup.Config{Namespace: "huge"})
	require.NoError(t, err)
	res, err := huge.Handle(ctx, payment{ID: "p1"})
	require.NoError(t, err)
	require.ErrorIs(t, res.Problem, dedup.ErrResultNotStored)
	rec, err = s.Get(ctx, "huge:p1")
	require.NoError(t, err)
	require.Equal(t, store.StateCompleted, rec.State, "the effect happened: the record completes without its result")
	require.Empty(t, rec.Result)
	dup, err := huge.Handle(ctx, payment{ID: "p1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusDuplicate, dup.Status)
	require.Empty(t, dup.Value)
}

// TestTxMisuse: outside a handler there is no claim to complete; invalid
// arguments are errors, never panics.
func TestTxMisuse(t *testing.T) {
	t.Parallel()
	d := newDB(t, 2)
	s := d.store(t, nil)
	ctx := t.Context()
	tx, err := d.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	require.ErrorIs(t, s.CompleteTx(ctx, tx, nil), mysqlstore.ErrNoClaim)
	h := txHandler(t, s, func(context.Context, *sql.Tx, payment) (int, error) { return 1, nil }, nil)
	_, err = h(ctx, payment{ID: "x"})
	require.ErrorIs(t, err, mysqlstore.ErrNoClaim)

	hctx := store.ContextWithClaim(ctx, &store.HeldClaim{Key: "k", Token: store.NewToken(), Retention: time.Hour})
	require.ErrorIs(t, s.CompleteTx(hctx, nil, nil), store.ErrInvalidConfig)
	require.ErrorIs(t, s.CompleteTx(hctx, tx, nil), store.ErrLeaseLost, "a claim the store never gave")
	zero := store.ContextWithClaim(ctx, &store.HeldClaim{Key: "k", Retention: time.Hour})
	require.ErrorIs(t, s.CompleteTx(zero, tx, nil), store.ErrLeaseLost)

	_, err = mysqlstore.TxHandler[payment, int](nil, func(context.Context, *sql.Tx, payment) (int, error) { return 1, nil }, nil)
	require.ErrorIs(t, err, store.ErrInvalidConfig)
	_, err = mysqlstore.TxHandler[payment, int](s, nil, nil)
	require.ErrorIs(t, err, store.ErrInvalidConfig)
	_, err = mysqlstore.TxHandler(s, func(context.Context, *sql.Tx, payment) (int, error) { return 1, nil }, &mysqlstore.TxOptions{MaxResultSize: -1})
	require.ErrorIs(t, err, store.ErrInvalidConfig)
	_, err = mysqlstore.TxHandler(s, func(context.Context, *sql.Tx, payment) (int, error) { return 1, nil }, &mysqlstore.TxOptions{Retries: -1})
	require.ErrorIs(t, err, store.ErrInvalidConfig)
}
