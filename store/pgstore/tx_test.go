package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/pgstore"
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
	*pgstore.Store
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

// payments creates the business table of a test: no unique constraint,
// so only the record can keep a payment from being written twice.
func (db *testDB) payments(t testing.TB) string {
	t.Helper()
	table := db.table("payments")
	db.exec(t, "CREATE TABLE "+table+" (payment_id text NOT NULL, amount int NOT NULL, worker text NOT NULL DEFAULT '')")
	return table
}

// insertPayment is the business write of the tests.
func insertPayment(ctx context.Context, tx pgx.Tx, table string, p payment, worker string) error {
	_, err := tx.Exec(ctx, "INSERT INTO "+table+" (payment_id, amount, worker) VALUES ($1, $2, $3)", p.ID, p.Amount, worker)
	return err
}

func txHandler[R any](t testing.TB, s *pgstore.Store, fn pgstore.TxFunc[payment, R], opts *pgstore.TxOptions) dedup.Handler[payment, R] {
	t.Helper()
	h, err := pgstore.TxHandler(s, fn, opts)
	require.NoError(t, err)
	return h
}

// TestTxHandlerCommitsTogether: the business row and the record commit in
// one transaction; the receiver does not complete the record again, and a
// duplicate gets the result stored by the transaction.
func TestTxHandlerCommitsTogether(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	s := db.store(t, nil)
	counted := &countingStore{Store: s}
	table := db.payments(t)
	rcv, err := dedup.NewReceiver(counted, paymentID, txHandler(t, s, func(ctx context.Context, tx pgx.Tx, p payment) (receipt, error) {
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
	require.Equal(t, 1, db.count(t, "SELECT count(*) FROM "+table))

	// HandleBatch: every message its own transaction, none completed again.
	msgs := []payment{{"b1", 1}, {"b2", 2}, {"b1", 1}, {"b3", 3}, {"p1", 10}}
	out := rcv.HandleBatch(t.Context(), msgs)
	for i, o := range out {
		require.NoError(t, o.Err, "message %d", i)
		require.True(t, o.Result.Status.Done(), "message %d: %v", i, o.Result.Status)
	}
	require.Zero(t, counted.completes.Load(), "HandleBatch completed records the transactions had completed")
	require.Equal(t, 4, db.count(t, "SELECT count(*) FROM "+table))
	require.Equal(t, 4, db.count(t, "SELECT count(DISTINCT payment_id) FROM "+table))
}

// TestTxHandlerRollsBackOnError: a handler error rolls its business write
// back and releases the claim; the retry writes once.
func TestTxHandlerRollsBackOnError(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	s := db.store(t, nil)
	table := db.payments(t)
	var runs atomic.Int64
	rcv, err := dedup.NewReceiver(s, paymentID, txHandler(t, s, func(ctx context.Context, tx pgx.Tx, p payment) (receipt, error) {
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
	require.Zero(t, db.count(t, "SELECT count(*) FROM "+table), "the failed attempt's write must be rolled back")
	rec, err := s.Get(t.Context(), "pay:p1")
	require.NoError(t, err)
	require.Equal(t, store.StateFailed, rec.State)
	require.Contains(t, rec.LastError, "gateway timeout")

	res, err := rcv.Handle(t.Context(), payment{ID: "p1", Amount: 5})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)
	require.Equal(t, 2, res.Attempt)
	require.Equal(t, 1, db.count(t, "SELECT count(*) FROM "+table))
}

// TestStaleWorkerRollsBack: a worker whose lease ended and whose key
// another delivery took over and completed fails its transactional
// completion with ErrLeaseLost; its business write is rolled back, and the
// receiver retries its message as in flight elsewhere.
func TestStaleWorkerRollsBack(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	s := db.store(t, nil)
	table := db.payments(t)
	inserted, resume := make(chan store.Token, 1), make(chan struct{})
	// The stale worker's receiver runs on a clock that never moves, so its
	// heartbeat never extends the lease and never gives it up: only the
	// database's clock ends it.
	stale, err := dedup.NewReceiver(s, paymentID, txHandler(t, s, func(ctx context.Context, tx pgx.Tx, p payment) (receipt, error) {
		if err := insertPayment(ctx, tx, table, p, "stale"); err != nil {
			return receipt{}, err
		}
		held, _ := store.ClaimFromContext(ctx)
		inserted <- held.Token
		<-resume
		return receipt{PaymentID: p.ID, Worker: "stale"}, nil
	}, nil), &dedup.Config{Namespace: "pay", Lease: 300 * time.Millisecond, Clock: clock.NewFake(time.Now())})
	require.NoError(t, err)
	fresh, err := dedup.NewReceiver(s, paymentID, txHandler(t, s, func(ctx context.Context, tx pgx.Tx, p payment) (receipt, error) {
		return receipt{PaymentID: p.ID, Worker: "fresh"}, insertPayment(ctx, tx, table, p, "fresh")
	}, nil), &dedup.Config{Namespace: "pay"})
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
	waitDBTime(t, db, rec.LeaseUntil)

	res, err := fresh.Handle(t.Context(), payment{ID: "p1", Amount: 7})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status, "the ended lease is taken over")
	require.Equal(t, 2, res.Attempt)

	close(resume)
	o := testenv.Recv(t, done, "the stale worker's Handle")
	require.ErrorIs(t, o.err, dedup.ErrLeaseLost, "the stale worker's completion must fail with ErrLeaseLost")
	require.Equal(t, delivery.Retry, adapter.Bind(stale).Decide(o.res, o.err).Action)
	require.Equal(t, delivery.ReasonInFlight, adapter.Bind(stale).Decide(o.res, o.err).Reason)

	require.Equal(t, 1, db.count(t, "SELECT count(*) FROM "+table), "the stale worker's write must be rolled back")
	require.Equal(t, 1, db.count(t, "SELECT count(*) FROM "+table+" WHERE worker = 'fresh'"))
	rec, err = s.Get(t.Context(), "pay:p1")
	require.NoError(t, err)
	require.Equal(t, store.StateCompleted, rec.State)
	require.JSONEq(t, `{"PaymentID":"p1","Worker":"fresh"}`, string(rec.Result))
	require.ErrorIs(t, s.Release(t.Context(), store.ReleaseRequest{Key: "pay:p1", Token: staleToken, Error: "x", Retention: time.Hour}), store.ErrLeaseLost)
}

// waitDBTime waits until the database's clock has passed at.
func waitDBTime(t *testing.T, db *testDB, at time.Time) {
	t.Helper()
	deadline := time.Now().Add(testenv.WaitTimeout)
	for !dbNow(t, db.pool).After(at) {
		require.True(t, time.Now().Before(deadline), "the database's clock did not pass %v", at)
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTakeoverWaitsForCommit (READ COMMITTED): while a transaction holds
// the row it completed, a delivery that tries to take the ended lease over
// waits for the commit, then finds the record completed.
func TestTakeoverWaitsForCommit(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	s := db.store(t, nil)
	table := db.payments(t)
	ctx := t.Context()
	key := "pay:p1"
	c, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: 200 * time.Millisecond})
	require.NoError(t, err)
	require.True(t, c.Acquired)
	held := &store.HeldClaim{Key: key, Token: c.Token, Attempt: 1, Retention: time.Hour}
	hctx := store.ContextWithClaim(ctx, held)

	tx, err := db.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	require.NoError(t, insertPayment(ctx, tx, table, payment{ID: "p1", Amount: 1}, "holder"))
	require.NoError(t, s.CompleteTx(hctx, tx, []byte(`"r1"`)))
	require.True(t, held.Completed(), "CompleteTx marks the claim completed")
	require.NoError(t, s.CompleteTx(hctx, tx, []byte(`"again"`)), "completing again in the same transaction changes nothing")
	waitDBTime(t, db, c.Record.LeaseUntil)

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
	waiting := "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0"
	for db.count(t, waiting, db.schema) == 0 {
		require.True(t, time.Now().Before(deadline), "the takeover never waited for the row lock")
		select {
		case o := <-taken:
			t.Fatalf("the takeover did not wait for the completing transaction: %+v, %v", o.c, o.err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	require.NoError(t, tx.Commit(ctx))
	o := testenv.Recv(t, taken, "the takeover after the commit")
	require.NoError(t, o.err)
	require.False(t, o.c.Acquired, "the record completed in the transaction must not be taken over")
	require.Equal(t, store.StateCompleted, o.c.Record.State)
	require.Equal(t, `"r1"`, string(o.c.Record.Result))
	require.Equal(t, 1, db.count(t, "SELECT count(*) FROM "+table))
}

// TestRepeatableReadRetries: under REPEATABLE READ and SERIALIZABLE, a
// heartbeat that extends the lease while the transaction runs makes the
// completion fail with a serialization failure; TxHandler runs the
// function again in a new transaction, and the payment is written once.
func TestRepeatableReadRetries(t *testing.T) {
	t.Parallel()
	for _, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		t.Run(string(iso), func(t *testing.T) {
			t.Parallel()
			db := newDB(t, 4)
			s := db.store(t, nil)
			table := db.payments(t)
			var runs atomic.Int64
			h := txHandler(t, s, func(ctx context.Context, tx pgx.Tx, p payment) (receipt, error) {
				if err := insertPayment(ctx, tx, table, p, ""); err != nil {
					return receipt{}, err
				}
				if runs.Add(1) == 1 {
					// The heartbeat: the lease is extended by another
					// connection after this transaction's snapshot.
					held, _ := store.ClaimFromContext(ctx)
					if err := s.Extend(ctx, store.ExtendRequest{Key: held.Key, Token: held.Token, Lease: time.Minute}); err != nil {
						return receipt{}, err
					}
				}
				return receipt{PaymentID: p.ID}, nil
			}, &pgstore.TxOptions{Tx: pgx.TxOptions{IsoLevel: iso}})
			rcv, err := dedup.NewReceiver(s, paymentID, h, &dedup.Config{Namespace: "pay"})
			require.NoError(t, err)
			res, err := rcv.Handle(t.Context(), payment{ID: "p1", Amount: 1})
			require.NoError(t, err)
			require.Equal(t, delivery.StatusProcessed, res.Status)
			require.EqualValues(t, 2, runs.Load(), "the serialization failure reruns the function once")
			require.Equal(t, 1, db.count(t, "SELECT count(*) FROM "+table))
		})
	}
}

// TestSerializationFailureWithoutRetries: with Retries exhausted, the
// serialization failure reaches the receiver (a handler error matching
// ErrStoreUnavailable, retried later) and the claim is released.
func TestSerializationFailureWithoutRetries(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	s := db.store(t, nil)
	table := db.payments(t)
	var runs atomic.Int64
	h := txHandler(t, s, func(ctx context.Context, tx pgx.Tx, p payment) (receipt, error) {
		if err := insertPayment(ctx, tx, table, p, ""); err != nil {
			return receipt{}, err
		}
		runs.Add(1)
		held, _ := store.ClaimFromContext(ctx)
		if err := s.Extend(ctx, store.ExtendRequest{Key: held.Key, Token: held.Token, Lease: time.Minute}); err != nil {
			return receipt{}, err
		}
		return receipt{PaymentID: p.ID}, nil
	}, &pgstore.TxOptions{Tx: pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, Retries: 1})
	rcv, err := dedup.NewReceiver(s, paymentID, h, &dedup.Config{Namespace: "pay"})
	require.NoError(t, err)
	res, err := rcv.Handle(t.Context(), payment{ID: "p1", Amount: 1})
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "40001", pgErr.Code)
	require.ErrorIs(t, err, dedup.ErrStoreUnavailable)
	require.Equal(t, delivery.Retry, adapter.Bind(rcv).Decide(res, err).Action)
	require.EqualValues(t, 2, runs.Load(), "one run and one retry")
	require.Zero(t, db.count(t, "SELECT count(*) FROM "+table))
	rec, err := s.Get(t.Context(), "pay:p1")
	require.NoError(t, err)
	require.Equal(t, store.StateFailed, rec.State)
}

// TestTxResults: what the transaction stores is what the receiver would
// have: the JSON of the value, nothing for a zero-size type, nothing (and
// a Problem) for a result over MaxResultSize.
func TestTxResults(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	s := db.store(t, nil)
	ctx := t.Context()

	empty, err := dedup.NewReceiver(s, paymentID, txHandler(t, s, func(context.Context, pgx.Tx, payment) (struct{}, error) {
		return struct{}{}, nil
	}, nil), &dedup.Config{Namespace: "empty"})
	require.NoError(t, err)
	_, err = empty.Handle(ctx, payment{ID: "p1"})
	require.NoError(t, err)
	rec, err := s.Get(ctx, "empty:p1")
	require.NoError(t, err)
	require.Equal(t, store.StateCompleted, rec.State)
	require.Empty(t, rec.Result)

	huge, err := dedup.NewReceiver(s, paymentID, txHandler(t, s, func(context.Context, pgx.Tx, payment) (string, error) {
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
	db := newDB(t, 2)
	s := db.store(t, nil)
	ctx := t.Context()
	tx, err := db.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	require.ErrorIs(t, s.CompleteTx(ctx, tx, nil), pgstore.ErrNoClaim)
	h := txHandler(t, s, func(context.Context, pgx.Tx, payment) (int, error) { return 1, nil }, nil)
	_, err = h(ctx, payment{ID: "x"})
	require.ErrorIs(t, err, pgstore.ErrNoClaim)

	hctx := store.ContextWithClaim(ctx, &store.HeldClaim{Key: "k", Token: store.NewToken(), Retention: time.Hour})
	require.ErrorIs(t, s.CompleteTx(hctx, nil, nil), store.ErrInvalidConfig)
	require.ErrorIs(t, s.CompleteTx(hctx, tx, nil), store.ErrLeaseLost, "a claim the store never gave")
	zero := store.ContextWithClaim(ctx, &store.HeldClaim{Key: "k", Retention: time.Hour})
	require.ErrorIs(t, s.CompleteTx(zero, tx, nil), store.ErrLeaseLost)

	_, err = pgstore.TxHandler[payment, int](nil, func(context.Context, pgx.Tx, payment) (int, error) { return 1, nil }, nil)
	require.ErrorIs(t, err, store.ErrInvalidConfig)
	_, err = pgstore.TxHandler[payment, int](s, nil, nil)
	require.ErrorIs(t, err, store.ErrInvalidConfig)
	_, err = pgstore.TxHandler(s, func(context.Context, pgx.Tx, payment) (int, error) { return 1, nil }, &pgstore.TxOptions{MaxResultSize: -1})
	require.ErrorIs(t, err, store.ErrInvalidConfig)
}
