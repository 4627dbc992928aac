package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/pgstore"
)

// sagaOrder is the message of the saga: charge, reserve, notify. An
// order OutOfStock fails its reservation for good (dedup.Permanent): it
// is given up, and its charge refunded.
type sagaOrder struct {
	ID         string
	Amount     int
	OutOfStock bool
}

// sagaCharge is the charge step's result, which the refund gets back.
type sagaCharge struct {
	ID     string
	Amount int
}

// sagaOrders are two orders that go through and two out of stock.
func sagaOrders() []sagaOrder {
	return []sagaOrder{{ID: "o1", Amount: 10}, {ID: "o2", Amount: 20, OutOfStock: true}, {ID: "o3", Amount: 30}, {ID: "o4", Amount: 40, OutOfStock: true}}
}

// sagaSaves is how many step records an order's run writes through the
// receiver's store: charge, reserve and notify for one that goes through;
// charge, the marker of a message given up, the refund's record and the
// final marker for one out of stock.
func sagaSaves(o sagaOrder) int {
	if o.OutOfStock {
		return 4
	}
	return 3
}

// sagaRig is the order service over pgstore wrapped in a FaultStore, on
// a fake clock that starts at the database's; fx counts the steps'
// effects and the refunds.
type sagaRig struct {
	db     *testDB
	pg     *pgstore.Store
	clk    *clock.Fake
	faults *deduptest.FaultStore
	fx     *deduptest.Effects
}

func newSagaRig(t *testing.T, faults ...deduptest.Fault) *sagaRig {
	t.Helper()
	db := newDB(t, 8)
	pg := db.store(t, nil)
	fs, err := deduptest.NewFaultStore(pg, 1, faults...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = fs.Close() })
	return &sagaRig{db: db, pg: pg, clk: clock.NewFake(dbNow(t, db.pool)), faults: fs, fx: new(deduptest.Effects)}
}

// effect counts the effect of step name of o, unless ctx ended.
func (g *sagaRig) effect(ctx context.Context, o sagaOrder, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g.fx.Step(o.ID, name)
	return nil
}

// handler is the saga, every effect inside its step.
func (g *sagaRig) handler(ctx context.Context, o sagaOrder) (string, error) {
	c, err := dedup.Step(ctx, "charge", func(ctx context.Context) (sagaCharge, error) {
		return sagaCharge{ID: "ch_" + o.ID, Amount: o.Amount}, g.effect(ctx, o, "charge")
	})
	if err != nil {
		return "", err
	}
	if _, err := dedup.Step(ctx, "reserve", func(ctx context.Context) (int, error) {
		if o.OutOfStock {
			return 0, dedup.Permanent(errors.New("out of stock"))
		}
		return 1, g.effect(ctx, o, "reserve")
	}); err != nil {
		return "", err
	}
	if _, err := dedup.Step(ctx, "notify", func(ctx context.Context) (bool, error) {
		return true, g.effect(ctx, o, "notify")
	}); err != nil {
		return "", err
	}
	return c.ID, nil
}

// compensations refund the charge, counted, after checking the refund
// got its own charge back, and cancel a reservation (which no order given
// up has: counted, it would be a compensation without its step).
func (g *sagaRig) compensations() dedup.Compensations {
	return dedup.Compensations{
		"charge": dedup.Compensate(func(ctx context.Context, o sagaOrder, c sagaCharge) error {
			if c.ID != "ch_"+o.ID || c.Amount != o.Amount {
				return dedup.Permanent(fmt.Errorf("the refund of %s got another charge: %+v", o.ID, c))
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			g.fx.Compensation(o.ID, "charge")
			return nil
		}),
		"reserve": dedup.Compensate(func(ctx context.Context, o sagaOrder, n int) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			g.fx.Compensation(o.ID, "reserve")
			return nil
		}),
	}
}

// run delivers the orders three times each to two replicas of the
// service, each a receiver of h over the rig's FaultStore, with the
// harness. As in runKit, the fake clock only paces redeliveries: each
// delivery first waits until the database's clock, on which pgstore ends
// leases, has caught up with it.
func (g *sagaRig) run(t *testing.T, h dedup.Handler[sagaOrder, string], orders []sagaOrder) *deduptest.Report[string] {
	t.Helper()
	service := deduptest.Replicas(func(int) (deduptest.TargetFunc[sagaOrder, string], error) {
		rcv, err := dedup.NewReceiver(g.faults, func(o sagaOrder) (string, error) { return o.ID, nil }, h, &dedup.Config{
			Namespace:     "orders",
			Lease:         kitLease,
			Clock:         g.clk,
			MaxAttempts:   8, // a crash at every step boundary costs an attempt each
			Steps:         true,
			Compensations: g.compensations(),
			Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		return func(ctx context.Context, o sagaOrder) adapter.Delivery[string] {
			catchUp(ctx, g.db, g.clk)
			return adapter.Bind(rcv).Deliver(ctx, o)
		}, err
	})
	rep, err := deduptest.Run(t.Context(), g.clk, service, orders, &deduptest.Options[sagaOrder]{
		Copies: 3, Workers: 4, Seed: 3, Lease: kitLease, Tick: time.Millisecond, Idle: 20 * time.Millisecond,
		Timeout: 20 * time.Second,
		Faults:  []*deduptest.FaultStore{g.faults},
		ID:      func(o sagaOrder) string { return o.ID },
		Steps:   g.fx,
	})
	require.NoError(t, err)
	require.Empty(t, rep.Ended, "the run must settle every copy\n%s", rep)
	require.Equal(t, 2, rep.Replicas)
	return rep
}

// checkSaga asserts what the saga promises: no problem in the report
// (every fault fired, too), every step's effect once (but the reservation
// of an order out of stock: never), the charge of an order given up
// refunded once and nothing else compensated, every copy of an order that
// goes through acknowledged with the charge's id, and every copy of one
// out of stock dead-lettered.
func checkSaga(t *testing.T, rep *deduptest.Report[string], orders []sagaOrder, refunds bool) {
	t.Helper()
	require.True(t, rep.Check(t), rep.String())
	for _, o := range orders {
		m := rep.Message(o.ID)
		if o.OutOfStock {
			if refunds {
				require.Equal(t, map[string]int{"charge": 1}, m.Steps, "%s\n%s", o.ID, rep)
				require.Equal(t, map[string]int{"charge": 1}, m.Compensations, "%s\n%s", o.ID, rep)
			}
			require.Equal(t, 3, m.DeadLettered, "%s\n%s", o.ID, rep)
			require.Zero(t, m.Acked, "%s\n%s", o.ID, rep)
			continue
		}
		require.Equal(t, map[string]int{"charge": 1, "reserve": 1, "notify": 1}, m.Steps, "%s\n%s", o.ID, rep)
		require.Empty(t, m.Compensations, "%s\n%s", o.ID, rep)
		require.Equal(t, 3, m.Acked, "%s\n%s", o.ID, rep)
		require.Zero(t, m.DeadLettered, "%s\n%s", o.ID, rep)
		for _, v := range m.Replayed() {
			require.Equal(t, "ch_"+o.ID, v, "%s: a duplicate gets the stored result\n%s", o.ID, rep)
		}
	}
}

// crashedAttempts returns the attempts of the message's deliveries that
// crashed.
func crashedAttempts(m *deduptest.MessageReport[string]) map[int]bool {
	out := map[int]bool{}
	for _, d := range m.Deliveries {
		if d.Crashed {
			out[d.Attempt] = true
		}
	}
	return out
}

// TestKitSagaSurvivesCrashesBetweenSteps: the order saga under the kit
// over pgstore, leases ending on the database's clock, three copies of
// each order over two processes: without a fault, with a worker dying
// after the Nth step record of every order (a run per boundary, the
// refund's records included), and at every boundary at once. Each step's
// effect happens once, each refund once, nothing is compensated that did
// not happen, every good order is acknowledged and every one out of stock
// dead-lettered.
func TestKitSagaSurvivesCrashesBetweenSteps(t *testing.T) {
	t.Parallel()
	t.Run("no fault", func(t *testing.T) {
		t.Parallel()
		g := newSagaRig(t)
		rep := g.run(t, g.handler, sagaOrders())
		checkSaga(t, rep, sagaOrders(), true)
		for _, o := range sagaOrders() {
			require.Empty(t, crashedAttempts(rep.Message(o.ID)), "%s\n%s", o.ID, rep)
		}
	})
	most := 0
	for _, o := range sagaOrders() {
		most = max(most, sagaSaves(o))
	}
	for n := 1; n <= most; n++ {
		t.Run(fmt.Sprintf("crash after step record %d", n), func(t *testing.T) {
			t.Parallel()
			var faults []deduptest.Fault
			for _, o := range sagaOrders() {
				if n <= sagaSaves(o) {
					faults = append(faults, deduptest.Fault{Op: deduptest.OpSaveStep, Kind: deduptest.Crash, Key: o.ID, Calls: []int{n}})
				}
			}
			g := newSagaRig(t, faults...)
			rep := g.run(t, g.handler, sagaOrders())
			checkSaga(t, rep, sagaOrders(), true)
			require.Len(t, g.faults.Injected(), len(faults), rep.String())
			for _, in := range g.faults.Injected() {
				require.Equal(t, n, in.Call)
				_, id := store.SplitKey(in.Key)
				require.Len(t, crashedAttempts(rep.Message(id)), 1, "%s\n%s", id, rep)
			}
		})
	}
	t.Run("crash at every boundary", func(t *testing.T) {
		t.Parallel()
		g := newSagaRig(t, deduptest.Fault{Op: deduptest.OpSaveStep, Kind: deduptest.Crash})
		rep := g.run(t, g.handler, sagaOrders())
		checkSaga(t, rep, sagaOrders(), true)
		perKey := map[string]int{}
		for _, in := range g.faults.Injected() {
			perKey[in.Key]++
		}
		for _, o := range sagaOrders() {
			require.Equal(t, sagaSaves(o), perKey["orders:"+o.ID], "every step record of %s crashed its worker", o.ID)
			require.Len(t, crashedAttempts(rep.Message(o.ID)), sagaSaves(o), "a claim per crash\n%s", rep)
		}
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
func (g *sagaRig) txSaga(t *testing.T, table string) dedup.Handler[sagaOrder, string] {
	t.Helper()
	write := func(ctx context.Context, tx pgx.Tx, o sagaOrder, name string) error {
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
	inner, err := pgstore.TxHandler(g.pg, func(ctx context.Context, tx pgx.Tx, o sagaOrder) (string, error) {
		c, err := dedup.Step(ctx, "charge", func(ctx context.Context) (sagaCharge, error) {
			return sagaCharge{ID: "ch_" + o.ID, Amount: o.Amount}, write(ctx, tx, o, "charge")
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
	return func(ctx context.Context, o sagaOrder) (string, error) {
		var made []string
		v, err := inner(context.WithValue(ctx, sagaEffectsKey{}, &made), o)
		if err == nil {
			for _, name := range made {
				g.fx.Step(o.ID, name)
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
// The orders out of stock are in a subtest of their own, skipped: there
// the charge, its record and its effect roll back with the transaction
// when the reservation fails for good, yet the receiver, giving the
// message up, still runs the charge's compensation (it remembers the
// step from the rolled back run; TxHandler calls StepsRolledBack only
// before rerunning fn after a serialization failure), so a charge that
// never committed is refunded: compensation-without-step for every order
// out of stock, with or without a crash. Remove the Skip once that is
// fixed.
func TestKitSagaInTxHandler(t *testing.T) {
	t.Parallel()
	var good, outOfStock []sagaOrder
	for _, o := range sagaOrders() {
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
			rep := g.run(t, g.txSaga(t, table), good)
			checkSaga(t, rep, good, false)
			require.Len(t, g.faults.Injected(), len(faults), rep.String())
			for _, o := range good {
				for _, step := range []string{"charge", "reserve", "notify"} {
					require.Equal(t, 1, g.db.count(t, "SELECT count(*) FROM "+table+" WHERE order_id = $1 AND step = $2", o.ID, step), "%s %s", o.ID, step)
				}
				require.Len(t, crashedAttempts(rep.Message(o.ID)), min(n, 1), "%s\n%s", o.ID, rep)
			}
		})
	}
	t.Run("out of stock", func(t *testing.T) {
		t.Parallel()
		g := newSagaRig(t)
		table := g.sagaTable(t)
		rep := g.run(t, g.txSaga(t, table), outOfStock)
		checkSaga(t, rep, outOfStock, false)
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
