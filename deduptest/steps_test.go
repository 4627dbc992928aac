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
	"github.com/dedup-go/dedup/internal/sagatest"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
)

// newStepStore returns a memstore, which keeps step records, on clk.
func newStepStore(t testing.TB, clk clock.Clock) store.Store {
	t.Helper()
	mem, err := memstore.New(&memstore.Options{Clock: clk})
	require.NoError(t, err)
	return mem
}

// order and charge are the saga's message and its charge step's result,
// shared with the stores' kit tests (internal/sagatest).
type (
	order  = sagatest.Order
	charge = sagatest.Charge
)

// sagaRig is the order saga of sagatest (its handler, compensations and
// effects) over a FaultStore over memstore, both on the rig's fake clock,
// run with the harness's own pacing: memstore ends leases on the fake
// clock, so a crashed claim is taken over as soon as the clock passes it.
type sagaRig struct {
	*sagatest.Rig
}

func newSagaRig(t *testing.T, faults ...deduptest.Fault) *sagaRig {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	fs, err := deduptest.NewFaultStore(newStepStore(t, clk), 1, faults...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = fs.Close() })
	return &sagaRig{Rig: &sagatest.Rig{Clk: clk, Faults: fs, Fx: new(deduptest.Effects), Lease: lease}}
}

func (g *sagaRig) newReceiver(h dedup.Handler[order, string], comps dedup.Compensations) (*dedup.Receiver[order, string], error) {
	return dedup.NewReceiver(g.Faults, func(o order) (string, error) { return o.ID, nil }, h, &dedup.Config{
		Namespace:     "orders",
		Lease:         lease,
		Clock:         g.Clk,
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

func (g *sagaRig) run(t *testing.T, target deduptest.Target[order, string], msgs []order) *deduptest.Report[string] {
	t.Helper()
	rep, err := deduptest.Run(t.Context(), g.Clk, target, msgs, &deduptest.Options[order]{
		ID:      func(o order) string { return o.ID },
		Steps:   g.Fx,
		Lease:   lease,
		Timeout: 10 * time.Second,
		Seed:    3,
		Faults:  []*deduptest.FaultStore{g.Faults},
	})
	require.NoError(t, err)
	return rep
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
		rep := g.run(t, g.service(g.Handler, g.Compensations()), sagatest.Orders())
		sagatest.Check(t, rep, sagatest.Orders(), true)
		require.Contains(t, rep.String(), "message o2: ")
		require.Contains(t, rep.String(), ", steps charge x1, compensated charge x1\n")
		require.Contains(t, rep.String(), ", steps charge x1 notify x1 reserve x1\n")
	})
	most := 0
	for _, o := range sagatest.Orders() {
		most = max(most, sagatest.Saves(o))
	}
	for n := 1; n <= most; n++ {
		t.Run(fmt.Sprintf("crash after step record %d", n), func(t *testing.T) {
			t.Parallel()
			var faults []deduptest.Fault
			for _, o := range sagatest.Orders() {
				if n <= sagatest.Saves(o) {
					faults = append(faults, deduptest.Fault{Op: deduptest.OpSaveStep, Kind: deduptest.Crash, Key: o.ID, Calls: []int{n}})
				}
			}
			g := newSagaRig(t, faults...)
			rep := g.run(t, g.service(g.Handler, g.Compensations()), sagatest.Orders())
			sagatest.Check(t, rep, sagatest.Orders(), true) // and every fault fired (FaultNotInjected)
			require.Len(t, g.Faults.Injected(), len(faults))
			for _, in := range g.Faults.Injected() {
				require.Equal(t, n, in.Call)
				_, id := store.SplitKey(in.Key)
				require.NotEmpty(t, sagatest.CrashedAttempts(rep.Message(id)), "%s\n%s", id, rep)
			}
		})
	}
	t.Run("crash at every boundary and completion", func(t *testing.T) {
		t.Parallel()
		faults := []deduptest.Fault{{Op: deduptest.OpSaveStep, Kind: deduptest.Crash}}
		for _, o := range sagatest.Orders() {
			if !o.OutOfStock {
				faults = append(faults, deduptest.Fault{Op: deduptest.OpComplete, Kind: deduptest.Crash, Key: o.ID, Calls: []int{1}})
			}
		}
		g := newSagaRig(t, faults...)
		rep := g.run(t, g.service(g.Handler, g.Compensations()), sagatest.Orders())
		sagatest.Check(t, rep, sagatest.Orders(), true)
		perKey := map[string]int{}
		for _, in := range g.Faults.Injected() {
			if in.Op == deduptest.OpSaveStep {
				perKey[in.Key]++
			}
		}
		for _, o := range sagatest.Orders() {
			require.Equal(t, sagatest.Saves(o), perKey["orders:"+o.ID], "every step record of %s crashed its worker", o.ID)
			// A claim per crash: after each step record, and after the
			// completion of an order that goes through.
			completions := 1
			if o.OutOfStock {
				completions = 0
			}
			require.Len(t, sagatest.CrashedAttempts(rep.Message(o.ID)), sagatest.Saves(o)+completions, rep.String())
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
		if err := g.Effect(ctx, o, "charge"); err != nil { // outside the step
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
			return 1, g.Effect(ctx, o, "reserve")
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
	require.Equal(t, 2, g.Fx.StepCount("o1", "charge"))

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
	comps := g.Compensations()
	comps["charge"] = dedup.Compensate(func(ctx context.Context, o order, c charge) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		g.Fx.Compensation(o.ID, "charge")
		g.Fx.Compensation(o.ID, "reserve") // the bug: nothing was reserved
		return nil
	})
	rep := g.run(t, g.service(g.Handler, comps), sagatest.Orders())
	without := rep.ProblemsOf(deduptest.CompensationWithoutStep)
	require.Len(t, without, 2, rep.String())
	require.Len(t, rep.Problems, 2, rep.String()) // nothing else
	for i, id := range []string{"o2", "o4"} {
		require.Equal(t, id, without[i].ID)
		require.Contains(t, without[i].Detail, `the compensation of step "reserve" ran (once), but the step's effect never happened`)
	}
	require.Equal(t, map[string]int{"charge": 1, "reserve": 1}, rep.Message("o2").Compensations)
	require.Equal(t, 1, g.Fx.CompensationCount("o2", "reserve"))
	require.Zero(t, g.Fx.StepCount("o2", "reserve"))
}

// Seeded: the refund is recorded twice (a compensation whose effect is
// not idempotent, run again): double-compensation, naming the step.
func TestDetectsDoubleCompensation(t *testing.T) {
	t.Parallel()
	g := newSagaRig(t)
	comps := g.Compensations()
	comps["charge"] = dedup.Compensate(func(ctx context.Context, o order, c charge) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		g.Fx.Compensation(o.ID, "charge")
		g.Fx.Compensation(o.ID, "charge") // the bug: two refunds
		return nil
	})
	rep := g.run(t, g.service(g.Handler, comps), sagatest.Orders())
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
		rep := g.run(t, g.service(g.Handler, g.Compensations()), sagatest.Orders())
		require.Empty(t, g.Faults.Injected())
		require.Len(t, rep.Problems, 1, rep.String())
		p := rep.Problems[0]
		require.Equal(t, deduptest.FaultNotInjected, p.Kind)
		require.Contains(t, p.Detail, `the crash fault on save-step of "o1" (calls [4]) was never injected: only 3 save-step calls matched it, so its call(s) [4] never came`)
	})
	t.Run("a handler without steps", func(t *testing.T) {
		t.Parallel()
		g := newSagaRig(t, deduptest.Fault{Op: deduptest.OpSaveStep, Kind: deduptest.Crash, Calls: []int{1}})
		rep := g.run(t, g.service(func(ctx context.Context, o order) (string, error) {
			return "ok", g.Effect(ctx, o, "charge") // no dedup.Step
		}, nil), sagatest.Orders()[:1])
		require.Len(t, rep.Problems, 1, rep.String())
		require.Contains(t, rep.Problems[0].Detail, "no save-step call matched it. The receiver saves a step record only for a handler's dedup.Step that completed")
	})
}
