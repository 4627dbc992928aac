package deduptest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
)

// stepStore is a store that keeps step records.
type stepStore interface {
	store.Store
	store.StepStore
}

// newStepStore returns a memstore that keeps step records, on clk.
func newStepStore(t testing.TB, clk clock.Clock) stepStore {
	t.Helper()
	mem, err := memstore.New(&memstore.Options{Clock: clk})
	require.NoError(t, err)
	return mem
}

// order is the message of the saga: charge, reserve, notify. An order
// OutOfStock fails its reservation for good (dedup.Permanent): it is
// given up, and its charge refunded.
type order struct {
	ID         string
	Amount     int
	OutOfStock bool
}

// charge is the charge step's result, which its compensation gets back.
type charge struct {
	ID     string
	Amount int
}

// sagaRig is an order service over a FaultStore over a store that keeps
// step records, on a fake clock; fx counts the steps' effects and the
// compensations'.
type sagaRig struct {
	clk    *clock.Fake
	faults *deduptest.FaultStore
	fx     *deduptest.Effects
}

func newSagaRig(t *testing.T, faults ...deduptest.Fault) *sagaRig {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	fs, err := deduptest.NewFaultStore(newStepStore(t, clk), 1, faults...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = fs.Close() })
	return &sagaRig{clk: clk, faults: fs, fx: new(deduptest.Effects)}
}

// effect counts the effect of step name of o, unless ctx ended: a step
// honours its context.
func (g *sagaRig) effect(ctx context.Context, o order, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g.fx.Step(o.ID, name)
	return nil
}

// handler is the saga, every effect inside its step.
func (g *sagaRig) handler(ctx context.Context, o order) (string, error) {
	c, err := dedup.Step(ctx, "charge", func(ctx context.Context) (charge, error) {
		return charge{ID: "ch_" + o.ID, Amount: o.Amount}, g.effect(ctx, o, "charge")
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

// compensations refund the charge and cancel the reservation, each
// counted; the refund checks it got its own charge back.
func (g *sagaRig) compensations() dedup.Compensations {
	return dedup.Compensations{
		"charge": dedup.Compensate(func(ctx context.Context, o order, c charge) error {
			if c.ID != "ch_"+o.ID || c.Amount != o.Amount {
				return dedup.Permanent(fmt.Errorf("the refund of %s got another charge: %+v", o.ID, c))
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			g.fx.Compensation(o.ID, "charge")
			return nil
		}),
		"reserve": dedup.Compensate(func(ctx context.Context, o order, n int) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			g.fx.Compensation(o.ID, "reserve")
			return nil
		}),
	}
}

func (g *sagaRig) newReceiver(h dedup.Handler[order, string], comps dedup.Compensations) (*dedup.Receiver[order, string], error) {
	return dedup.NewReceiver(g.faults, func(o order) (string, error) { return o.ID, nil }, h, &dedup.Config{
		Namespace:     "orders",
		Lease:         lease,
		Clock:         g.clk,
		StoreTimeout:  50 * time.Millisecond,
		MaxAttempts:   8, // a crash at every step boundary costs an attempt each
		Steps:         true,
		Compensations: comps,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
}

// service is two processes (Run's default) of h sharing the rig's store.
func (g *sagaRig) service(h dedup.Handler[order, string], comps dedup.Compensations) deduptest.Target[order, string] {
	return deduptest.Replicas(func(int) (deduptest.Target[order, string], error) { return bind(g.newReceiver(h, comps)) })
}

func (g *sagaRig) opts() *deduptest.Options[order] {
	return &deduptest.Options[order]{
		ID:      func(o order) string { return o.ID },
		Steps:   g.fx,
		Lease:   lease,
		Timeout: 10 * time.Second,
		Seed:    3,
		Faults:  []*deduptest.FaultStore{g.faults},
	}
}

func (g *sagaRig) run(t *testing.T, target deduptest.Target[order, string], msgs []order) *deduptest.Report[string] {
	t.Helper()
	rep, err := deduptest.Run(t.Context(), g.clk, target, msgs, g.opts())
	require.NoError(t, err)
	return rep
}

// sagaOrders are two orders that go through and two out of stock.
func sagaOrders() []order {
	return []order{{ID: "o1", Amount: 10}, {ID: "o2", Amount: 20, OutOfStock: true}, {ID: "o3", Amount: 30}, {ID: "o4", Amount: 40, OutOfStock: true}}
}

// saves is how many step records an order's run writes: charge, reserve
// and notify for one that goes through; charge, then the marker of a
// message given up, the charge's compensation and the final marker for
// one out of stock.
func saves(o order) int { return 3 + boolInt(o.OutOfStock) }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkSaga asserts what the saga promises: every step's effect once (but
// the reservation of an order out of stock: never), the charge of an
// order given up refunded once and nothing else compensated, every copy
// of an order that goes through acknowledged and of one out of stock
// dead-lettered, and no problem in the report.
func checkSaga(t *testing.T, g *sagaRig, rep *deduptest.Report[string]) {
	t.Helper()
	require.True(t, rep.Check(t))
	for _, o := range sagaOrders() {
		m := rep.Message(o.ID)
		if o.OutOfStock {
			require.Equal(t, map[string]int{"charge": 1}, m.Steps, "%s\n%s", o.ID, rep)
			require.Equal(t, map[string]int{"charge": 1}, m.Compensations, "%s\n%s", o.ID, rep)
			require.Equal(t, 3, m.DeadLettered, "%s\n%s", o.ID, rep)
			continue
		}
		require.Equal(t, map[string]int{"charge": 1, "reserve": 1, "notify": 1}, m.Steps, "%s\n%s", o.ID, rep)
		require.Empty(t, m.Compensations, "%s\n%s", o.ID, rep)
		require.Equal(t, 3, m.Acked, "%s\n%s", o.ID, rep)
	}
}

// crashed reports whether a delivery of the message crashed.
func crashed(m *deduptest.MessageReport[string]) bool {
	for _, d := range m.Deliveries {
		if d.Crashed {
			return true
		}
	}
	return false
}

// The saga under Run, three copies of each order over two processes,
// without a fault, and with a worker crashing at each step boundary (a
// run per boundary: after the Nth step record of each order), then at
// every boundary at once along with every first completion: each step's
// effect happens once, each refund once, nothing is compensated that did
// not happen, and every copy is settled as it should be.
func TestSagaSurvivesCrashesBetweenSteps(t *testing.T) {
	t.Parallel()
	t.Run("no fault", func(t *testing.T) {
		t.Parallel()
		g := newSagaRig(t)
		rep := g.run(t, g.service(g.handler, g.compensations()), sagaOrders())
		checkSaga(t, g, rep)
		require.Contains(t, rep.String(), "message o2: ")
		require.Contains(t, rep.String(), ", steps charge x1, compensated charge x1\n")
		require.Contains(t, rep.String(), ", steps charge x1 notify x1 reserve x1\n")
	})
	most := 0
	for _, o := range sagaOrders() {
		most = max(most, saves(o))
	}
	for n := 1; n <= most; n++ {
		t.Run(fmt.Sprintf("crash after step record %d", n), func(t *testing.T) {
			t.Parallel()
			var faults []deduptest.Fault
			for _, o := range sagaOrders() {
				if n <= saves(o) {
					faults = append(faults, deduptest.Fault{Op: deduptest.OpSaveStep, Kind: deduptest.Crash, Key: o.ID, Calls: []int{n}})
				}
			}
			g := newSagaRig(t, faults...)
			rep := g.run(t, g.service(g.handler, g.compensations()), sagaOrders())
			checkSaga(t, g, rep) // and every fault fired (FaultNotInjected)
			require.Len(t, g.faults.Injected(), len(faults))
			for _, in := range g.faults.Injected() {
				require.Equal(t, n, in.Call)
				_, id := store.SplitKey(in.Key)
				require.True(t, crashed(rep.Message(id)), "%s\n%s", id, rep)
			}
		})
	}
	t.Run("crash at every boundary and completion", func(t *testing.T) {
		t.Parallel()
		faults := []deduptest.Fault{{Op: deduptest.OpSaveStep, Kind: deduptest.Crash}}
		for _, o := range sagaOrders() {
			if !o.OutOfStock {
				faults = append(faults, deduptest.Fault{Op: deduptest.OpComplete, Kind: deduptest.Crash, Key: o.ID, Calls: []int{1}})
			}
		}
		g := newSagaRig(t, faults...)
		rep := g.run(t, g.service(g.handler, g.compensations()), sagaOrders())
		checkSaga(t, g, rep)
		perKey := map[string]int{}
		for _, in := range g.faults.Injected() {
			if in.Op == deduptest.OpSaveStep {
				perKey[in.Key]++
			}
		}
		for _, o := range sagaOrders() {
			require.Equal(t, saves(o), perKey["orders:"+o.ID], "every step record of %s crashed its worker", o.ID)
			// A claim per crash: after each step record, and after the
			// completion of an order that goes through.
			attempts := map[int]bool{}
			for _, d := range rep.Message(o.ID).Deliveries {
				if d.Crashed {
					attempts[d.Attempt] = true
				}
			}
			require.Len(t, attempts, saves(o)+boolInt(!o.OutOfStock), rep.String())
		}
	})
}

// Seeded: the charge's effect is done outside its step (before it, as a
// handler not yet converted would), and the reservation fails once: the
// retry charges again. The report names the message, the step and how
// many times.
func TestDetectsDoubleStep(t *testing.T) {
	t.Parallel()
	g := newSagaRig(t)
	var mu sync.Mutex
	failed := map[string]bool{}
	h := func(ctx context.Context, o order) (string, error) {
		if err := g.effect(ctx, o, "charge"); err != nil { // outside the step
			return "", err
		}
		if _, err := dedup.Step(ctx, "charge", func(ctx context.Context) (charge, error) {
			return charge{ID: "ch_" + o.ID, Amount: o.Amount}, ctx.Err()
		}); err != nil {
			return "", err
		}
		_, err := dedup.Step(ctx, "reserve", func(ctx context.Context) (int, error) {
			mu.Lock()
			first := !failed[o.ID]
			failed[o.ID] = true
			mu.Unlock()
			if first {
				return 0, errors.New("warehouse busy")
			}
			return 1, g.effect(ctx, o, "reserve")
		})
		return "ok", err
	}
	msgs := []order{{ID: "o1", Amount: 10}, {ID: "o2", Amount: 20}}
	rep := g.run(t, g.service(h, nil), msgs)
	double := rep.ProblemsOf(deduptest.DoubleStep)
	require.Len(t, double, 2, rep.String())
	require.Len(t, rep.Problems, 2, rep.String()) // nothing else
	for i, p := range double {
		require.Equal(t, msgs[i].ID, p.ID)
		require.Contains(t, p.Detail, `the effect of step "charge" happened 2 times`)
		require.Contains(t, p.Detail, "outside the step's function")
		require.True(t, strings.HasPrefix(p.String(), "message "+msgs[i].ID+": double-step: "), p.String())
	}
	require.Equal(t, map[string]int{"charge": 2, "reserve": 1}, rep.Message("o1").Steps)
	require.Equal(t, 2, g.fx.StepCount("o1", "charge"))

	var ft fakeT
	require.False(t, rep.Check(&ft))
	require.Contains(t, ft.msgs[0], "message o1: double-step")
}

// Seeded: the refund also cancels the reservation, of an order given up
// before anything was reserved (the compensation undoes what never
// happened). The report names the message and the step.
func TestDetectsCompensationWithoutStep(t *testing.T) {
	t.Parallel()
	g := newSagaRig(t)
	comps := g.compensations()
	comps["charge"] = dedup.Compensate(func(ctx context.Context, o order, c charge) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		g.fx.Compensation(o.ID, "charge")
		g.fx.Compensation(o.ID, "reserve") // the bug: nothing was reserved
		return nil
	})
	rep := g.run(t, g.service(g.handler, comps), sagaOrders())
	without := rep.ProblemsOf(deduptest.CompensationWithoutStep)
	require.Len(t, without, 2, rep.String())
	require.Len(t, rep.Problems, 2, rep.String()) // nothing else
	for i, id := range []string{"o2", "o4"} {
		require.Equal(t, id, without[i].ID)
		require.Contains(t, without[i].Detail, `the compensation of step "reserve" ran (once), but the step's effect never happened`)
	}
	require.Equal(t, map[string]int{"charge": 1, "reserve": 1}, rep.Message("o2").Compensations)
	require.Equal(t, 1, g.fx.CompensationCount("o2", "reserve"))
	require.Zero(t, g.fx.StepCount("o2", "reserve"))
}

// Seeded: the refund is recorded twice (a compensation whose effect is
// not idempotent, run again): double-compensation, naming the step.
func TestDetectsDoubleCompensation(t *testing.T) {
	t.Parallel()
	g := newSagaRig(t)
	comps := g.compensations()
	comps["charge"] = dedup.Compensate(func(ctx context.Context, o order, c charge) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		g.fx.Compensation(o.ID, "charge")
		g.fx.Compensation(o.ID, "charge") // the bug: two refunds
		return nil
	})
	rep := g.run(t, g.service(g.handler, comps), sagaOrders())
	double := rep.ProblemsOf(deduptest.DoubleCompensation)
	require.Len(t, double, 2, rep.String())
	require.Len(t, rep.Problems, 2, rep.String())
	require.Equal(t, "o2", double[0].ID)
	require.Contains(t, double[0].Detail, `the compensation of step "charge" ran 2 times`)
}

// A crash fault on step records that never fired is a problem of the run,
// naming the fault and why: a call its Calls lists never came, or no
// handler saved a step record at all.
func TestStepFaultNotInjected(t *testing.T) {
	t.Parallel()
	t.Run("a boundary past the last step", func(t *testing.T) {
		t.Parallel()
		g := newSagaRig(t, deduptest.Fault{Op: deduptest.OpSaveStep, Kind: deduptest.Crash, Key: "o1", Calls: []int{4}})
		rep := g.run(t, g.service(g.handler, g.compensations()), sagaOrders())
		require.Empty(t, g.faults.Injected())
		require.Len(t, rep.Problems, 1, rep.String())
		p := rep.Problems[0]
		require.Equal(t, deduptest.FaultNotInjected, p.Kind)
		require.Contains(t, p.Detail, `the crash fault on save-step of "o1" (calls [4]) was never injected: only 3 save-step calls matched it, so its call(s) [4] never came`)
	})
	t.Run("a handler without steps", func(t *testing.T) {
		t.Parallel()
		g := newSagaRig(t, deduptest.Fault{Op: deduptest.OpSaveStep, Kind: deduptest.Crash, Calls: []int{1}})
		rep := g.run(t, g.service(func(ctx context.Context, o order) (string, error) {
			return "ok", g.effect(ctx, o, "charge") // no dedup.Step
		}, nil), sagaOrders()[:1])
		require.Len(t, rep.Problems, 1, rep.String())
		require.Contains(t, rep.Problems[0].Detail, "no save-step call matched it. The receiver saves a step record only for a handler's dedup.Step that completed")
	})
}
