package mysqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/mysqlstore"
)

// stepNames returns the names and values of recs, by name.
func stepNames(recs []store.StepRecord) map[string]string {
	out := make(map[string]string, len(recs))
	for _, r := range recs {
		out[r.Name] = string(r.Value)
	}
	return out
}

// save records name=value for key under token.
func save(ctx context.Context, s *mysqlstore.Store, key string, token store.Token, name, value string) error {
	return s.SaveStep(ctx, store.SaveStepRequest{Key: key, Token: token, Name: name, Value: []byte(value), Retention: time.Hour})
}

// load returns the steps of key under token, by name.
func load(t *testing.T, ctx context.Context, s *mysqlstore.Store, key string, token store.Token) map[string]string {
	t.Helper()
	recs, err := s.LoadSteps(ctx, store.StepsRequest{Key: key, Token: token})
	require.NoError(t, err)
	return stepNames(recs)
}

// acquire claims key, which must be free.
func acquire(t *testing.T, s *mysqlstore.Store, key string) store.Claim {
	t.Helper()
	c, err := s.Acquire(t.Context(), store.AcquireRequest{Key: key, Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, c.Acquired, "claim %s", key)
	return c
}

// TestStepsFreshAfterExpiry: a key whose completed or failed record
// expired is claimed afresh, reusing its row (the claim statement) or,
// once Cleanup deleted the row, inserting one: either way the new record
// has no steps. A failed record taken over before it expired keeps them.
func TestStepsFreshAfterExpiry(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	s := d.store(t, nil)
	for _, c := range []struct {
		name    string
		settle  func(ctx context.Context, key string, tok store.Token, retention time.Duration) error
		cleanup bool
	}{
		{name: "Completed", settle: func(ctx context.Context, key string, tok store.Token, retention time.Duration) error {
			return s.Complete(ctx, store.CompleteRequest{Key: key, Token: tok, Result: []byte("r"), Retention: retention})
		}},
		{name: "Failed", settle: func(ctx context.Context, key string, tok store.Token, retention time.Duration) error {
			return s.Release(ctx, store.ReleaseRequest{Key: key, Token: tok, Error: "e", Retention: retention})
		}},
		{name: "CleanedUp", cleanup: true, settle: func(ctx context.Context, key string, tok store.Token, retention time.Duration) error {
			return s.Release(ctx, store.ReleaseRequest{Key: key, Token: tok, Error: "e", Retention: retention})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			key := "fresh:" + c.name
			first := acquire(t, s, key)
			require.NoError(t, save(ctx, s, key, first.Token, "a", "1"))
			require.NoError(t, c.settle(ctx, key, first.Token, tick))
			rec := get(t, s, key)
			require.Equal(t, map[string]string{"a": "1"}, stepNames(rec.Steps), "Get of the settled record")
			waitDBTime(t, d.db, rec.ExpiresAt)
			if c.cleanup {
				_, err := s.Cleanup(ctx)
				require.NoError(t, err)
				require.Zero(t, d.count(t, "SELECT COUNT(*) FROM dedup_records WHERE `key` = ?", key), "Cleanup left the row")
			}
			again := acquire(t, s, key)
			require.Equal(t, 1, again.Record.Attempt, "claimed afresh")
			require.Empty(t, load(t, ctx, s, key, again.Token), "steps of a fresh record")
			require.Empty(t, get(t, s, key).Steps, "Get of a fresh record")
		})
	}
	t.Run("TakeoverOfFailedKeeps", func(t *testing.T) {
		ctx := t.Context()
		key := "fresh:takeover"
		first := acquire(t, s, key)
		require.NoError(t, save(ctx, s, key, first.Token, "a", "1"))
		require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: key, Token: first.Token, Error: "e", Retention: time.Hour}))
		again := acquire(t, s, key)
		require.Equal(t, 2, again.Record.Attempt)
		require.Equal(t, map[string]string{"a": "1"}, load(t, ctx, s, key, again.Token))
	})
}

// TestStepsReplaceAndValues: a step saved again under its name replaces
// the earlier record; values are kept as given (empty, nil, any bytes);
// names up to store.MaxStepNameLen bytes are kept and others refused,
// before any round trip, with store.ErrInvalidConfig; a steps column that
// the store did not write is an error, not records made up.
func TestStepsReplaceAndValues(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	s := d.store(t, nil)
	ctx := t.Context()
	c := acquire(t, s, "values")
	long := strings.Repeat("é", store.MaxStepNameLen/2)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	require.NoError(t, save(ctx, s, "values", c.Token, "a", "old"))
	require.NoError(t, save(ctx, s, "values", c.Token, "b", "kept"))
	require.NoError(t, save(ctx, s, "values", c.Token, "a", "new"))
	require.NoError(t, s.SaveStep(ctx, store.SaveStepRequest{Key: "values", Token: c.Token, Name: "nil", Retention: time.Hour}))
	require.NoError(t, save(ctx, s, "values", c.Token, "empty", ""))
	require.NoError(t, s.SaveStep(ctx, store.SaveStepRequest{Key: "values", Token: c.Token, Name: long, Value: all, Retention: time.Hour}))
	recs, err := s.LoadSteps(ctx, store.StepsRequest{Key: "values", Token: c.Token})
	require.NoError(t, err)
	require.Len(t, recs, 5)
	require.Equal(t, map[string]string{"a": "new", "b": "kept", "nil": "", "empty": "", long: string(all)}, stepNames(recs))
	for _, r := range recs {
		require.NotNil(t, r.Value, "the value of %q", r.Name)
	}

	for _, name := range []string{"", long + "x", "\xff"} {
		err := save(ctx, s, "values", c.Token, name, "v")
		require.ErrorIs(t, err, store.ErrInvalidConfig, "name %q", name)
		require.NotErrorIs(t, err, store.ErrLeaseLost)
	}
	require.Len(t, get(t, s, "values").Steps, 5, "a refused name recorded nothing")

	d.exec(t, "UPDATE dedup_records SET steps = CONCAT(steps, 'x') WHERE `key` = 'values'")
	_, err = s.LoadSteps(ctx, store.StepsRequest{Key: "values", Token: c.Token})
	require.ErrorContains(t, err, "malformed")
	_, err = s.Get(ctx, "values")
	require.ErrorContains(t, err, "malformed")
}

// TestStepsInTxHandler: a step recorded inside TxHandler's function is
// written in its transaction and commits with it; a transaction rolled
// back leaves no step; a rerun after a deadlock starts without the steps
// of the run rolled back, after HeldClaim.StepsRolledBack; the record's
// row is not locked while the function runs (the heartbeat's Extend goes
// through); a claim lost before a step is refused, and one lost before the
// commit writes nothing; a step needs no connection besides the
// transaction's.
func TestStepsInTxHandler(t *testing.T) {
	t.Parallel()
	d := newDB(t, 8)
	s := d.store(t, nil)
	claim := func(t *testing.T, key string) (*store.HeldClaim, context.Context) {
		c := acquire(t, s, key)
		held := &store.HeldClaim{Key: key, Token: c.Token, Attempt: 1, Retention: time.Hour}
		return held, store.ContextWithClaim(t.Context(), held)
	}
	run := func(t *testing.T, hctx context.Context, fn mysqlstore.TxFunc[string, string]) error {
		h, err := mysqlstore.TxHandler(s, fn, nil)
		require.NoError(t, err)
		_, err = h(hctx, "msg")
		return err
	}

	t.Run("CommitsWithTheTransaction", func(t *testing.T) {
		held, hctx := claim(t, "tx:commit")
		err := run(t, hctx, func(ctx context.Context, tx *sql.Tx, _ string) (string, error) {
			if err := save(ctx, s, held.Key, held.Token, "charge", "1"); err != nil {
				return "", err
			}
			require.Equal(t, map[string]string{"charge": "1"}, load(t, ctx, s, held.Key, held.Token), "inside the transaction")
			require.Empty(t, load(t, t.Context(), s, held.Key, held.Token), "outside it, before the commit")
			// The heartbeat's extension does not wait for the transaction.
			ectx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			require.NoError(t, s.Extend(ectx, store.ExtendRequest{Key: held.Key, Token: held.Token, Lease: time.Minute}))
			return "done", nil
		})
		require.NoError(t, err)
		rec := get(t, s, held.Key)
		require.Equal(t, store.StateCompleted, rec.State)
		require.Equal(t, map[string]string{"charge": "1"}, stepNames(rec.Steps))
		require.Zero(t, held.StepsGeneration())
	})

	t.Run("RollbackLeavesNoStep", func(t *testing.T) {
		held, hctx := claim(t, "tx:rollback")
		boom := errors.New("boom")
		err := run(t, hctx, func(ctx context.Context, tx *sql.Tx, _ string) (string, error) {
			require.NoError(t, save(ctx, s, held.Key, held.Token, "charge", "1"))
			return "", boom
		})
		require.ErrorIs(t, err, boom)
		rec := get(t, s, held.Key)
		require.Equal(t, store.StateProcessing, rec.State)
		require.Empty(t, rec.Steps)
		require.Empty(t, load(t, t.Context(), s, held.Key, held.Token))
	})

	t.Run("RerunAfterDeadlock", func(t *testing.T) {
		held, hctx := claim(t, "tx:rerun")
		runs := 0
		err := run(t, hctx, func(ctx context.Context, tx *sql.Tx, _ string) (string, error) {
			runs++
			require.Equal(t, uint64(runs-1), held.StepsGeneration(), "StepsRolledBack before run %d", runs)
			if runs == 1 {
				require.NoError(t, save(ctx, s, held.Key, held.Token, "first", "1"))
				return "", &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock"}
			}
			require.Empty(t, load(t, ctx, s, held.Key, held.Token), "the rolled back run's steps")
			require.NoError(t, save(ctx, s, held.Key, held.Token, "second", "2"))
			return "done", nil
		})
		require.NoError(t, err)
		require.Equal(t, 2, runs)
		require.Equal(t, uint64(1), held.StepsGeneration())
		require.Equal(t, map[string]string{"second": "2"}, stepNames(get(t, s, held.Key).Steps))
	})

	// lose releases the claim under the function's feet, and another
	// delivery claims the key.
	lose := func(t *testing.T, held *store.HeldClaim) {
		require.NoError(t, s.Release(t.Context(), store.ReleaseRequest{Key: held.Key, Token: held.Token, Error: "e", Retention: time.Hour}))
		acquire(t, s, held.Key)
	}

	t.Run("LostClaimRefused", func(t *testing.T) {
		held, hctx := claim(t, "tx:lost-first")
		err := run(t, hctx, func(ctx context.Context, tx *sql.Tx, _ string) (string, error) {
			lose(t, held)
			_, err := s.LoadSteps(ctx, store.StepsRequest{Key: held.Key, Token: held.Token})
			require.ErrorIs(t, err, store.ErrLeaseLost, "LoadSteps")
			err = save(ctx, s, held.Key, held.Token, "a", "1")
			require.ErrorIs(t, err, store.ErrLeaseLost, "SaveStep")
			return "", err
		})
		require.ErrorIs(t, err, store.ErrLeaseLost)
		require.Empty(t, get(t, s, held.Key).Steps)
	})

	t.Run("SettledClaimRefused", func(t *testing.T) {
		held, hctx := claim(t, "tx:settled")
		err := run(t, hctx, func(ctx context.Context, tx *sql.Tx, _ string) (string, error) {
			require.NoError(t, s.Complete(t.Context(), store.CompleteRequest{Key: held.Key, Token: held.Token, Retention: time.Hour}))
			err := save(ctx, s, held.Key, held.Token, "a", "1")
			require.ErrorIs(t, err, store.ErrLeaseLost, "SaveStep")
			return "", err
		})
		require.ErrorIs(t, err, store.ErrLeaseLost)
		require.Empty(t, get(t, s, held.Key).Steps)
	})

	t.Run("LostClaimWritesNothing", func(t *testing.T) {
		held, hctx := claim(t, "tx:lost")
		err := run(t, hctx, func(ctx context.Context, tx *sql.Tx, _ string) (string, error) {
			require.NoError(t, save(ctx, s, held.Key, held.Token, "a", "1"))
			lose(t, held)
			// Under REPEATABLE READ the transaction's snapshot may still
			// show the claim: a step saved now is refused by the write
			// before the completion.
			_ = save(ctx, s, held.Key, held.Token, "b", "2")
			return "done", nil
		})
		require.ErrorIs(t, err, store.ErrLeaseLost)
		rec := get(t, s, held.Key)
		require.Equal(t, store.StateProcessing, rec.State)
		require.Empty(t, rec.Steps)
	})

	t.Run("OneConnection", func(t *testing.T) {
		// A step inside the transaction needs no second connection of the
		// pool, which the transaction's holds.
		db := open(t, d.cfg, 1)
		one := newStore(t, db, &mysqlstore.Options{Timeout: 5 * time.Second})
		// Prepare the statements first (the first use of a statement
		// prepares it on the pool).
		ctx := t.Context()
		c := acquire(t, one, "tx:one-warm")
		stranger := store.NewToken()
		require.ErrorIs(t, one.Complete(ctx, store.CompleteRequest{Key: c.Record.Key, Token: stranger, Retention: time.Hour}), store.ErrLeaseLost)
		require.ErrorIs(t, save(ctx, one, c.Record.Key, stranger, "a", "1"), store.ErrLeaseLost)
		_, err := one.LoadSteps(ctx, store.StepsRequest{Key: c.Record.Key, Token: stranger})
		require.ErrorIs(t, err, store.ErrLeaseLost)

		c = acquire(t, one, "tx:one")
		held := &store.HeldClaim{Key: "tx:one", Token: c.Token, Attempt: 1, Retention: time.Hour}
		h, err := mysqlstore.TxHandler(one, func(ctx context.Context, tx *sql.Tx, _ string) (string, error) {
			if err := save(ctx, one, held.Key, held.Token, "a", "1"); err != nil {
				return "", err
			}
			require.Equal(t, map[string]string{"a": "1"}, load(t, ctx, one, held.Key, held.Token))
			return "done", nil
		}, nil)
		require.NoError(t, err)
		_, err = h(store.ContextWithClaim(ctx, held), "msg")
		require.NoError(t, err)
		require.Equal(t, map[string]string{"a": "1"}, stepNames(get(t, one, "tx:one").Steps))
	})

	t.Run("OtherKeysAreNotTheTransactions", func(t *testing.T) {
		_, hctx := claim(t, "tx:mine")
		other := acquire(t, s, "tx:other")
		boom := errors.New("boom")
		err := run(t, hctx, func(ctx context.Context, tx *sql.Tx, _ string) (string, error) {
			require.NoError(t, save(ctx, s, "tx:other", other.Token, "a", "1"))
			return "", boom
		})
		require.ErrorIs(t, err, boom)
		require.Equal(t, map[string]string{"a": "1"}, load(t, t.Context(), s, "tx:other", other.Token), "a step of another key, outside the transaction")
	})
}

// TestUpgradeSteps: a table of the version before step records (with
// created_at and completed_at, without steps) is refused by New without
// Migrate, naming the ALTER TABLE, and upgraded in place by Migrate: a
// claim made before the upgrade has no steps, and records them after it.
func TestUpgradeSteps(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	ctx := t.Context()
	d.exec(t, schema010)
	d.exec(t, "ALTER TABLE old_records ADD COLUMN created_at DATETIME(6) NULL, ADD COLUMN completed_at DATETIME(6) NULL")
	tok := store.NewToken()
	d.exec(t, "INSERT INTO old_records (`key`, state, token, attempt, fingerprint, result, last_error, lease_until, expires_at, created_at) VALUES "+
		"('ns:held', 'processing', ?, 1, '', NULL, '', UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, UTC_TIMESTAMP(6) + INTERVAL 2 HOUR, UTC_TIMESTAMP(6))", tok[:])

	_, err := mysqlstore.New(ctx, d.db, &mysqlstore.Options{Table: "old_records"})
	requireMisconfigured(t, err, "lacks column(s) steps", "earlier version", "Options.Migrate",
		"ALTER TABLE `old_records` ADD COLUMN steps LONGBLOB NULL")

	s := newStore(t, d.db, &mysqlstore.Options{Table: "old_records"}) // Migrate: true
	require.Empty(t, load(t, ctx, s, "ns:held", tok))
	require.NoError(t, save(ctx, s, "ns:held", tok, "a", "1"))
	require.Equal(t, map[string]string{"a": "1"}, stepNames(get(t, s, "ns:held").Steps))
	require.NoError(t, s.Migrate(ctx), "Migrate of an up-to-date table")
}

// TestStepsWithTx: a handler that manages its own transaction records its
// steps in it under WithTx, and CompleteTx writes them: committed with
// the transaction, none after a rollback; completing again writes them
// not again. Without a claim, or with a nil transaction, WithTx changes
// nothing.
func TestStepsWithTx(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	s := d.store(t, nil)
	ctx := t.Context()
	require.Equal(t, ctx, s.WithTx(ctx, nil), "no claim, no transaction")
	for _, commit := range []bool{true, false} {
		key := map[bool]string{true: "own:commit", false: "own:rollback"}[commit]
		c := acquire(t, s, key)
		held := &store.HeldClaim{Key: key, Token: c.Token, Attempt: 1, Retention: time.Hour}
		hctx := store.ContextWithClaim(ctx, held)
		require.Equal(t, hctx, s.WithTx(hctx, nil), "a nil transaction")
		tx, err := d.db.BeginTx(ctx, nil)
		require.NoError(t, err)
		wctx := s.WithTx(hctx, tx)
		require.NoError(t, save(wctx, s, key, c.Token, "a", "1"))
		require.Empty(t, load(t, hctx, s, key, c.Token), "outside the transaction")
		require.NoError(t, s.CompleteTx(wctx, tx, []byte(`"r"`)))
		require.NoError(t, s.CompleteTx(wctx, tx, []byte(`"r"`)), "completing again")
		if commit {
			require.NoError(t, tx.Commit())
			rec := get(t, s, key)
			require.Equal(t, store.StateCompleted, rec.State)
			require.Equal(t, map[string]string{"a": "1"}, stepNames(rec.Steps))
			continue
		}
		require.NoError(t, tx.Rollback())
		rec := get(t, s, key)
		require.Equal(t, store.StateProcessing, rec.State)
		require.Empty(t, rec.Steps)
	}
}

// TestDedupStepInTxHandler: dedup.Step inside a TxHandler's function,
// end to end through a receiver. A step whose transaction rolled back is
// not recorded, so the next delivery runs it again; when TxHandler reruns
// the function after a deadlock, the receiver forgets the rolled back
// step (StepsRolledBack) and runs it again, instead of replaying it or
// refusing its name as repeated.
func TestDedupStepInTxHandler(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	s := d.store(t, nil)
	table := d.payments(t)
	var charges, runs atomic.Int64
	var failOnce, deadlockOnce atomic.Bool
	h := txHandler(t, s, func(ctx context.Context, tx *sql.Tx, p payment) (receipt, error) {
		runs.Add(1)
		charge, err := dedup.Step(ctx, "charge", func(context.Context) (string, error) {
			return fmt.Sprint("ch_", charges.Add(1)), nil
		})
		if err != nil {
			return receipt{}, err
		}
		if err := insertPayment(ctx, tx, table, p, charge); err != nil {
			return receipt{}, err
		}
		if failOnce.CompareAndSwap(true, false) {
			return receipt{}, errors.New("warehouse down")
		}
		if deadlockOnce.CompareAndSwap(true, false) {
			return receipt{}, &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock"}
		}
		return receipt{PaymentID: p.ID, Worker: charge}, nil
	}, nil)
	rcv, err := dedup.NewReceiver(s, paymentID, h, &dedup.Config{Namespace: "pay", Steps: true})
	require.NoError(t, err)

	// The first delivery fails after its step: rolled back with it.
	failOnce.Store(true)
	_, err = rcv.Handle(t.Context(), payment{ID: "p1"})
	require.ErrorContains(t, err, "warehouse down")
	require.Empty(t, get(t, s, "pay:p1").Steps)
	// The redelivery runs the step again; a deadlock after it rolls the
	// transaction back, and the rerun runs the step once more.
	deadlockOnce.Store(true)
	res, err := rcv.Handle(t.Context(), payment{ID: "p1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)
	require.EqualValues(t, 3, charges.Load(), "the step ran in each of the three transactions")
	require.EqualValues(t, 3, runs.Load())
	require.Equal(t, "ch_3", res.Value.Worker)
	rec := get(t, s, "pay:p1")
	require.Equal(t, store.StateCompleted, rec.State)
	require.Len(t, rec.Steps, 1)
	require.Equal(t, "charge", rec.Steps[0].Name)
	require.Equal(t, 1, d.count(t, "SELECT COUNT(*) FROM "+table+" WHERE worker = 'ch_3'"))
	require.Equal(t, 1, d.count(t, "SELECT COUNT(*) FROM "+table))
}

// TestTxHandlerGivenUpCompensatesNothingRolledBack: a message given up
// for a permanent error inside TxHandler had its step rolled back with
// the transaction, so its compensation must not run (it would undo an
// effect that never happened).
func TestTxHandlerGivenUpCompensatesNothingRolledBack(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	s := d.store(t, nil)
	table := d.payments(t)
	var refunds atomic.Int64
	h := txHandler(t, s, func(ctx context.Context, tx *sql.Tx, p payment) (receipt, error) {
		charge, err := dedup.Step(ctx, "charge", func(context.Context) (string, error) { return "ch_1", nil })
		if err != nil {
			return receipt{}, err
		}
		if err := insertPayment(ctx, tx, table, p, charge); err != nil {
			return receipt{}, err
		}
		return receipt{}, dedup.Permanent(errors.New("out of stock"))
	}, nil)
	rcv, err := dedup.NewReceiver(s, paymentID, h, &dedup.Config{Namespace: "pay", Compensations: dedup.Compensations{
		"charge": dedup.Compensate(func(ctx context.Context, p payment, charge string) error { refunds.Add(1); return ctx.Err() }),
	}})
	require.NoError(t, err)
	_, err = rcv.Handle(t.Context(), payment{ID: "p1"})
	require.ErrorContains(t, err, "out of stock")
	require.Zero(t, refunds.Load(), "the charge rolled back with the transaction: nothing to refund")
	require.Zero(t, d.count(t, "SELECT COUNT(*) FROM "+table))
}
