package pgstore_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/pgstore"
)

// kitLease is the receivers' lease in the kit tests. pgstore ends a lease
// on the database's clock, not on the harness's fake one: a crashed
// claim is taken over only once this much real time has passed.
const kitLease = 250 * time.Millisecond

// crashPoint is where a worker dies on the first delivery of a message
// that gets there.
type crashPoint int

const (
	// crashAfterReturn: the handler returned its value, the receiver has
	// not recorded the outcome yet (the kit's Crash fault on OpComplete
	// strikes there).
	crashAfterReturn crashPoint = iota
	// crashAfterWrite: the handler made its business write and dies before
	// it returns.
	crashAfterWrite
)

// crasher kills the worker of the first delivery of each message that
// reaches its crash point: the delivery answers deduptest.ErrCrashed
// (which matches store.ErrLeaseLost, so the receiver neither completes
// nor releases the claim, as a dead worker would not), and Run redelivers
// the message after the lease. Both handlers of the test face it at the
// same points.
type crasher struct {
	at map[string]crashPoint

	mu  sync.Mutex
	hit map[string]bool
}

// strike reports whether the worker running id dies at point p: the first
// time id gets to its crash point.
func (c *crasher) strike(id string, p crashPoint) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if at, ok := c.at[id]; !ok || at != p || c.hit[id] {
		return false
	}
	if c.hit == nil {
		c.hit = map[string]bool{}
	}
	c.hit[id] = true
	return true
}

func (c *crasher) crashes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.hit)
}

func crashErr(id string, p crashPoint) error {
	return fmt.Errorf("worker running %s died (crash point %d): %w", id, p, deduptest.ErrCrashed)
}

// afterReturn wraps h with the crash after the handler returned.
func (c *crasher) afterReturn(h dedup.Handler[payment, receipt]) dedup.Handler[payment, receipt] {
	return func(ctx context.Context, p payment) (receipt, error) {
		v, err := h(ctx, p)
		if err == nil && c.strike(p.ID, crashAfterReturn) {
			return receipt{}, crashErr(p.ID, crashAfterReturn)
		}
		return v, err
	}
}

// kitPayments are the messages of the kit tests; at says where each one's
// first delivery crashes (every one does, at one point or the other).
func kitPayments() (msgs []payment, at map[string]crashPoint) {
	at = map[string]crashPoint{}
	for i := range 6 {
		p := payment{ID: fmt.Sprintf("p%d", i), Amount: 10 * (i + 1)}
		msgs = append(msgs, p)
		at[p.ID] = crashPoint(i % 2)
	}
	return msgs, at
}

// runKit delivers msgs three times each to two replicas of a service,
// each a receiver of h over st (on a fake clock), with the harness, and
// counts each payment's effect in table. The faults of fss that were not
// injected are in the report.
func runKit(t *testing.T, db *testDB, st store.Store, table string, h dedup.Handler[payment, receipt], msgs []payment, fss ...*deduptest.FaultStore) *deduptest.Report[receipt] {
	t.Helper()
	// pgstore judges leases on the database's clock, the receiver on the
	// harness's fake one, and the receiver refuses a store whose refused
	// claim ended before it asked (a clock disagreement). So the fake
	// clock starts at the database's time and never runs ahead of it when
	// a delivery begins: Run jumps it forward (a crashed message is
	// redelivered a lease later, a retry after its delay), and each
	// delivery first waits until the database's clock has caught up, as a
	// broker's redelivery takes real time. While deliveries run, Run moves
	// the fake clock slower than real time (Tick per Idle).
	clk := clock.NewFake(dbNow(t, db.pool))
	service := deduptest.Replicas(func(int) (deduptest.TargetFunc[payment, receipt], error) {
		rcv, err := dedup.NewReceiver(st, paymentID, h, &dedup.Config{
			Namespace: "pay", Lease: kitLease, Clock: clk,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		return func(ctx context.Context, p payment) adapter.Delivery[receipt] {
			catchUp(ctx, db, clk)
			return adapter.Bind(rcv).Deliver(ctx, p)
		}, err
	})
	rep, err := deduptest.Run(t.Context(), clk, service, msgs, &deduptest.Options[payment]{
		Copies: 3, Workers: 4, Seed: 7, Lease: kitLease, Tick: time.Millisecond, Idle: 20 * time.Millisecond,
		Faults: fss,
		ID:     func(p payment) string { return p.ID },
		Effects: func(id string) int {
			return db.count(t, "SELECT count(*) FROM "+table+" WHERE payment_id = $1", id)
		},
	})
	require.NoError(t, err)
	require.Empty(t, rep.Ended, "the run must settle every copy\n%s", rep)
	require.Equal(t, 2, rep.Replicas)
	return rep
}

// catchUp waits until the database's clock has reached clk's time, or
// ctx ends.
func catchUp(ctx context.Context, db *testDB, clk *clock.Fake) {
	for {
		var now time.Time
		if err := db.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now); err != nil {
			return // ctx ended: the delivery answers so
		}
		ahead := clk.Now().Sub(now)
		if ahead <= 0 {
			return
		}
		wait := time.NewTimer(ahead)
		select {
		case <-wait.C:
		case <-ctx.Done():
			wait.Stop()
			return
		}
	}
}

// crashedIDs returns the ids of the messages one of whose deliveries the
// harness saw crash.
func crashedIDs(rep *deduptest.Report[receipt]) []string {
	var ids []string
	for _, m := range rep.Messages {
		for _, d := range m.Deliveries {
			if d.Crashed {
				ids = append(ids, m.ID)
				break
			}
		}
	}
	return ids
}

func problemIDs(ps []deduptest.Problem) []string {
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	return ids
}

// TestKitShowsTxHandlerClosesTheCrashWindow: with the deduptest harness
// over the real database, a worker that dies after the payment was
// written and before the record was (after its handler returned, or
// after the write inside it) leaves a double payment when the handler
// writes with the pool, and none when it writes in TxHandler's
// transaction, where the payment and the record commit together.
//
// The kit's Crash fault strikes the receiver's Complete, which a
// TxHandler delivery never calls (the record completed in its
// transaction): over a FaultStore alone the TxHandler faces no crash at
// all, and the report says so (fault-not-injected), which the "inside"
// subtest checks first. So both handlers face the same crasher, which
// kills the worker at the same points of every message; the "outside"
// subtest also runs the kit's own Crash fault, to show that the crasher's
// after-return point is that fault's, with the same outcome.
func TestKitShowsTxHandlerClosesTheCrashWindow(t *testing.T) {
	t.Parallel()

	t.Run("outside", func(t *testing.T) {
		t.Parallel()
		msgs, at := kitPayments()
		ids := make([]string, len(msgs))
		faults := make([]deduptest.Fault, len(msgs))
		for i, p := range msgs {
			ids[i] = p.ID
			faults[i] = deduptest.Fault{Op: deduptest.OpComplete, Kind: deduptest.Crash, Key: p.ID, Calls: []int{1}}
		}
		// outsideHandler writes the payment with the pool, outside any
		// transaction of the store; cr (when not nil) kills its worker
		// after the write.
		outsideHandler := func(db *testDB, table string, cr *crasher) dedup.Handler[payment, receipt] {
			return func(ctx context.Context, p payment) (receipt, error) {
				if _, err := db.pool.Exec(ctx, "INSERT INTO "+table+" (payment_id, amount) VALUES ($1, $2)", p.ID, p.Amount); err != nil {
					return receipt{}, err
				}
				if cr != nil && cr.strike(p.ID, crashAfterWrite) {
					return receipt{}, crashErr(p.ID, crashAfterWrite)
				}
				return receipt{PaymentID: p.ID}, nil
			}
		}

		// The kit's Crash fault: the first completion of every key dropped.
		db := newDB(t, 8)
		table := db.payments(t)
		fs, err := deduptest.NewFaultStore(db.store(t, nil), 1, faults...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = fs.Close() })
		rep := runKit(t, db, fs, table, outsideHandler(db, table, nil), msgs, fs)
		require.Len(t, fs.Injected(), len(msgs), "the kit's Crash fault strikes the first completion of each key")
		require.ElementsMatch(t, ids, crashedIDs(rep), "the harness saw every message crash\n%s", rep)
		require.Error(t, rep.Err())
		require.ElementsMatch(t, ids, problemIDs(rep.ProblemsOf(deduptest.DoubleEffect)),
			"every crashed payment is made twice by a handler writing outside the record's transaction\n%s", rep)
		require.Len(t, rep.Problems, len(msgs), "double effects are the only problems\n%s", rep)

		// The crasher both subtests use. Its worker dies before the
		// receiver's Complete, so the kit's fault is left out here: it would
		// crash the redelivery that took the key over as well.
		db = newDB(t, 8)
		table = db.payments(t)
		cr := &crasher{at: at}
		rep = runKit(t, db, db.store(t, nil), table, cr.afterReturn(outsideHandler(db, table, cr)), msgs)
		require.Equal(t, len(msgs), cr.crashes(), "the crasher kills the first delivery of every message")
		require.ElementsMatch(t, ids, crashedIDs(rep), "the harness saw every message crash\n%s", rep)
		require.ElementsMatch(t, ids, problemIDs(rep.ProblemsOf(deduptest.DoubleEffect)),
			"every crashed payment is made twice, at either crash point\n%s", rep)
		require.Len(t, rep.Problems, len(msgs), "double effects are the only problems\n%s", rep)
	})

	t.Run("inside", func(t *testing.T) {
		t.Parallel()
		msgs, at := kitPayments()
		faults := make([]deduptest.Fault, len(msgs))
		for i, p := range msgs {
			faults[i] = deduptest.Fault{Op: deduptest.OpComplete, Kind: deduptest.Crash, Key: p.ID, Calls: []int{1}}
		}
		// The payment handler written with TxHandler: the insert is in the
		// transaction the record completes in. cr (when not nil) kills its
		// worker after the insert, before the commit.
		insideHandler := func(s *pgstore.Store, table string, cr *crasher) dedup.Handler[payment, receipt] {
			return txHandler(t, s, func(ctx context.Context, tx pgx.Tx, p payment) (receipt, error) {
				if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (payment_id, amount) VALUES ($1, $2)", p.ID, p.Amount); err != nil {
					return receipt{}, err
				}
				if cr != nil && cr.strike(p.ID, crashAfterWrite) {
					return receipt{}, crashErr(p.ID, crashAfterWrite)
				}
				return receipt{PaymentID: p.ID}, nil
			}, nil)
		}

		// The kit's Crash fault alone never reaches the TxHandler: the
		// report is not OK, and says which faults never fired and how to
		// crash such a handler.
		db := newDB(t, 8)
		table := db.payments(t)
		s := db.store(t, nil)
		fs, err := deduptest.NewFaultStore(s, 1, faults...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = fs.Close() })
		rep := runKit(t, db, fs, table, insideHandler(s, table, nil), msgs, fs)
		require.Empty(t, fs.Injected(), "a TxHandler delivery never calls Complete: the kit's Crash fault cannot reach it")
		require.Empty(t, crashedIDs(rep), "nothing crashed\n%s", rep)
		require.Error(t, rep.Err(), "the crash window was not tested, and the report must say so\n%s", rep)
		unfired := rep.ProblemsOf(deduptest.FaultNotInjected)
		require.Len(t, unfired, len(msgs), rep.String())
		require.Len(t, rep.Problems, len(msgs), "unfired faults are the only problems\n%s", rep)
		for i, p := range msgs {
			require.Contains(t, unfired[i].Detail, fmt.Sprintf(`the crash fault on complete of %q (calls [1]) was never injected`, p.ID))
			require.Contains(t, unfired[i].Detail, "TxHandler")
			require.Contains(t, unfired[i].Detail, "deduptest.ErrCrashed")
		}

		// So the crasher kills its worker from the handler, where the docs
		// say to: inside the transaction, or around the handler.
		db = newDB(t, 8)
		table = db.payments(t)
		s = db.store(t, nil)
		cr := &crasher{at: at}
		rep = runKit(t, db, s, table, cr.afterReturn(insideHandler(s, table, cr)), msgs)
		require.Equal(t, len(msgs), cr.crashes(), "the crasher kills the first delivery of every message")
		require.Len(t, crashedIDs(rep), len(msgs), "the harness saw every message crash\n%s", rep)
		rep.Check(t)
		for _, p := range msgs {
			require.Equal(t, 1, db.count(t, "SELECT count(*) FROM "+table+" WHERE payment_id = $1", p.ID), "payment %s", p.ID)
			m := rep.Message(p.ID)
			require.Equal(t, 3, m.Acked, "payment %s: every copy acknowledged\n%s", p.ID, rep)
			for _, v := range m.Replayed() {
				require.Equal(t, receipt{PaymentID: p.ID}, v, "payment %s: a duplicate gets the stored receipt", p.ID)
			}
			// Either the payment and the record both survived the crash (a
			// crash after return: the redeliveries are duplicates of the dead
			// worker's attempt), or neither did (a crash after the write,
			// before the commit: the takeover pays, under a later attempt).
			i := slices.IndexFunc(m.Deliveries, func(d deduptest.DeliveryReport[receipt]) bool { return d.Crashed })
			dead := m.Deliveries[i]
			switch at[p.ID] {
			case crashAfterReturn:
				require.True(t, slices.ContainsFunc(m.Deliveries[i+1:], func(d deduptest.DeliveryReport[receipt]) bool {
					return d.Status == delivery.StatusDuplicate && d.Attempt == dead.Attempt
				}), "payment %s: the dead worker's transaction committed the payment and the record\n%s", p.ID, rep)
			case crashAfterWrite:
				require.True(t, slices.ContainsFunc(m.Deliveries[i+1:], func(d deduptest.DeliveryReport[receipt]) bool {
					return d.Status == delivery.StatusProcessed && d.Attempt > dead.Attempt
				}), "payment %s: the dead worker's transaction rolled back, the takeover paid\n%s", p.ID, rep)
			}
		}
	})
}
