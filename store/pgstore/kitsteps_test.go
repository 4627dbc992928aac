package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/internal/sagatest"
	"github.com/dedup-go/dedup/store/pgstore"
)

// sagaRig is the order saga's rig (sagatest) over pgstore, on a fake
// clock that starts at the database's; as in runKit, the fake clock only
// paces redeliveries: each delivery first waits until the database's
// clock, on which pgstore ends leases, has caught up with it.
type sagaRig struct {
	*sagatest.Rig
	db *testDB
	pg *pgstore.Store
}

func newSagaRig(t *testing.T, faults ...deduptest.Fault) *sagaRig {
	t.Helper()
	db := newDB(t, 8)
	pg := db.store(t, nil)
	wait := func(ctx context.Context, clk *clock.Fake) { catchUp(ctx, db, clk) }
	return &sagaRig{Rig: sagatest.NewRig(t, pg, dbNow(t, db.pool), kitLease, wait, faults...), db: db, pg: pg}
}

// TestKitSagaSurvivesCrashesBetweenSteps: the order saga (sagatest) under
// the kit over pgstore, leases ending on the database's clock, three
// copies of each order over two processes: without a fault, with a
// worker dying after the Nth step record of every order, and at every
// boundary at once.
func TestKitSagaSurvivesCrashesBetweenSteps(t *testing.T) {
	t.Parallel()
	sagatest.CrashesBetweenSteps(t, func(t *testing.T, faults ...deduptest.Fault) *sagatest.Rig {
		return newSagaRig(t, faults...).Rig
	})
}

// sagaEffectsKey carries the step effects a TxHandler's transaction made,
// counted only once it committed.
type sagaEffectsKey struct{}

// txSaga is the saga inside pgstore.TxHandler: each step's effect is a
// row of table written in the handler's transaction, and the steps are
// recorded in it too (written with the completion). The harness counts a
// step's effect when the transaction that made it commits: a wrapper
// around the handler TxHandler returns counts the rows its run wrote once
// it returned without error (committed); a run that failed rolled them
// back with its step records.
func (g *sagaRig) txSaga(t *testing.T, table string) dedup.Handler[sagatest.Order, string] {
	t.Helper()
	write := func(ctx context.Context, tx pgx.Tx, o sagatest.Order, name string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (order_id, step) VALUES ($1, $2)", o.ID, name); err != nil {
			return err
		}
		made := ctx.Value(sagaEffectsKey{}).(*[]string)
		*made = append(*made, name)
		return nil
	}
	inner, err := pgstore.TxHandler(g.pg, func(ctx context.Context, tx pgx.Tx, o sagatest.Order) (string, error) {
		c, err := dedup.Step(ctx, "charge", func(ctx context.Context) (sagatest.Charge, error) {
			return sagatest.Charge{ID: "ch_" + o.ID, Amount: o.Amount}, write(ctx, tx, o, "charge")
		})
		if err != nil {
			return "", err
		}
		if _, err := dedup.Step(ctx, "reserve", func(ctx context.Context) (int, error) {
			if o.OutOfStock {
				return 0, dedup.Permanent(errors.New("out of stock"))
			}
			return 1, write(ctx, tx, o, "reserve")
		}); err != nil {
			return "", err
		}
		if _, err := dedup.Step(ctx, "notify", func(ctx context.Context) (bool, error) {
			return true, write(ctx, tx, o, "notify")
		}); err != nil {
			return "", err
		}
		return c.ID, nil
	}, nil)
	require.NoError(t, err)
	return func(ctx context.Context, o sagatest.Order) (string, error) {
		var made []string
		v, err := inner(context.WithValue(ctx, sagaEffectsKey{}, &made), o)
		if err == nil {
			for _, name := range made {
				g.Fx.Step(o.ID, name)
			}
		}
		return v, err
	}
}

// TestKitSagaInTxHandler: the saga inside pgstore.TxHandler under the
// kit, its steps recorded in the handler's transaction, with a worker
// dying after the Nth step record of every order (a run per boundary).
// A crash inside the transaction rolls back the step records with the
// effects (the next attempt runs them again, in a new transaction), so
// each effect commits once, and every copy is acknowledged.
//
// For the orders out of stock, the charge, its record and its effect roll
// back with the transaction when the reservation fails for good: the
// message is given up with nothing to compensate (TxHandler tells the
// receiver of the rollback, which reads the step records again before it
// compensates; it once refunded the charge that never committed).
func TestKitSagaInTxHandler(t *testing.T) {
	t.Parallel()
	var good, outOfStock []sagatest.Order
	for _, o := range sagatest.Orders() {
		if o.OutOfStock {
			outOfStock = append(outOfStock, o)
		} else {
			good = append(good, o)
		}
	}
	for n := range 4 {
		name := "no fault"
		if n > 0 {
			name = fmt.Sprintf("crash after step record %d", n)
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var faults []deduptest.Fault
			if n > 0 {
				for _, o := range good {
					faults = append(faults, deduptest.Fault{Op: deduptest.OpSaveStep, Kind: deduptest.Crash, Key: o.ID, Calls: []int{n}})
				}
			}
			g := newSagaRig(t, faults...)
			table := g.sagaTable(t)
			rep := g.Run(t, g.txSaga(t, table), good)
			sagatest.Check(t, rep, good, false)
			require.Len(t, g.Faults.Injected(), len(faults), rep.String())
			for _, o := range good {
				for _, step := range []string{"charge", "reserve", "notify"} {
					require.Equal(t, 1, g.db.count(t, "SELECT count(*) FROM "+table+" WHERE order_id = $1 AND step = $2", o.ID, step), "%s %s", o.ID, step)
				}
				require.Len(t, sagatest.CrashedAttempts(rep.Message(o.ID)), min(n, 1), "%s\n%s", o.ID, rep)
			}
		})
	}
	t.Run("out of stock", func(t *testing.T) {
		t.Parallel()
		g := newSagaRig(t)
		table := g.sagaTable(t)
		rep := g.Run(t, g.txSaga(t, table), outOfStock)
		sagatest.Check(t, rep, outOfStock, false)
		for _, o := range outOfStock {
			m := rep.Message(o.ID)
			require.Empty(t, m.Steps, "%s: the charge rolled back\n%s", o.ID, rep)
			require.Empty(t, m.Compensations, "%s: nothing to refund\n%s", o.ID, rep)
			require.Zero(t, g.db.count(t, "SELECT count(*) FROM "+table+" WHERE order_id = $1", o.ID), o.ID)
		}
	})
}

// sagaTable creates the table of the TxHandler saga's effects.
func (g *sagaRig) sagaTable(t *testing.T) string {
	t.Helper()
	table := g.db.table("saga_effects")
	g.db.exec(t, "CREATE TABLE "+table+" (order_id text NOT NULL, step text NOT NULL)")
	return table
}
