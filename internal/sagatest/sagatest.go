// Package sagatest is the order saga the stores' tests run under the
// test kit (deduptest): charge, reserve and notify as recorded steps, the
// charge refunded when an order out of stock is given up, delivered three
// times to two replicas with workers dying between steps. Each store's
// test gives it a store, the fake clock's start and how a delivery waits
// for the store's own clock; the checks are the same for every store.
package sagatest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/store"
)

// Order is the message of the saga. An order OutOfStock fails its
// reservation for good (dedup.Permanent): it is given up, and its charge
// refunded.
type Order struct {
	ID         string
	Amount     int
	OutOfStock bool
}

// Charge is the charge step's result, which the refund gets back.
type Charge struct {
	ID     string
	Amount int
}

// Orders are two orders that go through and two out of stock.
func Orders() []Order {
	return []Order{{ID: "o1", Amount: 10}, {ID: "o2", Amount: 20, OutOfStock: true}, {ID: "o3", Amount: 30}, {ID: "o4", Amount: 40, OutOfStock: true}}
}

// Saves is how many step records an order's run writes through the
// receiver's store: charge, reserve and notify for one that goes through;
// charge, the record of a message given up, the refund's record and the
// given-up record again for one out of stock.
func Saves(o Order) int {
	if o.OutOfStock {
		return 4
	}
	return 3
}

// Rig is the order service over a store wrapped in a FaultStore, on a
// fake clock; Fx counts the steps' effects and the refunds.
type Rig struct {
	Clk    *clock.Fake
	Faults *deduptest.FaultStore
	Fx     *deduptest.Effects
	// Lease is the receivers' lease: the store ends it on its own clock,
	// so a crashed claim is taken over once this much real time passed.
	Lease time.Duration
	// CatchUp waits, at the start of each delivery, until the store's
	// clock has reached the fake clock's time (or ctx ends): the fake
	// clock only paces redeliveries.
	CatchUp func(ctx context.Context, clk *clock.Fake)
}

// NewRig wraps st in a FaultStore with faults, on a fake clock starting
// at start.
func NewRig(t testing.TB, st store.Store, start time.Time, lease time.Duration, catchUp func(context.Context, *clock.Fake), faults ...deduptest.Fault) *Rig {
	t.Helper()
	fs, err := deduptest.NewFaultStore(st, 1, faults...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fs.Close() })
	return &Rig{Clk: clock.NewFake(start), Faults: fs, Fx: new(deduptest.Effects), Lease: lease, CatchUp: catchUp}
}

// Effect counts the effect of step name of o, unless ctx ended.
func (g *Rig) Effect(ctx context.Context, o Order, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g.Fx.Step(o.ID, name)
	return nil
}

// Handler is the saga, every effect inside its step.
func (g *Rig) Handler(ctx context.Context, o Order) (string, error) {
	c, err := dedup.Step(ctx, "charge", func(ctx context.Context) (Charge, error) {
		return Charge{ID: "ch_" + o.ID, Amount: o.Amount}, g.Effect(ctx, o, "charge")
	})
	if err != nil {
		return "", err
	}
	if _, err := dedup.Step(ctx, "reserve", func(ctx context.Context) (int, error) {
		if o.OutOfStock {
			return 0, dedup.Permanent(errors.New("out of stock"))
		}
		return 1, g.Effect(ctx, o, "reserve")
	}); err != nil {
		return "", err
	}
	if _, err := dedup.Step(ctx, "notify", func(ctx context.Context) (bool, error) {
		return true, g.Effect(ctx, o, "notify")
	}); err != nil {
		return "", err
	}
	return c.ID, nil
}

// Compensations refund the charge, counted, after checking the refund got
// its own charge back, and cancel a reservation (which no order given up
// has: counted, it would be a compensation without its step).
func (g *Rig) Compensations() dedup.Compensations {
	return dedup.Compensations{
		"charge": dedup.Compensate(func(ctx context.Context, o Order, c Charge) error {
			if c.ID != "ch_"+o.ID || c.Amount != o.Amount {
				return dedup.Permanent(fmt.Errorf("the refund of %s got another charge: %+v", o.ID, c))
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			g.Fx.Compensation(o.ID, "charge")
			return nil
		}),
		"reserve": dedup.Compensate(func(ctx context.Context, o Order, n int) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			g.Fx.Compensation(o.ID, "reserve")
			return nil
		}),
	}
}

// Run delivers the orders three times each to two replicas of the
// service, each a receiver of h over the rig's FaultStore, with the
// harness. Each delivery first waits for the store's clock (CatchUp);
// while deliveries run, Run moves the fake clock slower than real time
// (Tick per Idle), so that it never runs ahead of the store's when a
// delivery begins.
func (g *Rig) Run(t testing.TB, h dedup.Handler[Order, string], orders []Order) *deduptest.Report[string] {
	t.Helper()
	service := deduptest.Replicas(func(int) (deduptest.TargetFunc[Order, string], error) {
		rcv, err := dedup.NewReceiver(g.Faults, func(o Order) (string, error) { return o.ID, nil }, h, &dedup.Config{
			Namespace:     "orders",
			Lease:         g.Lease,
			Clock:         g.Clk,
			MaxAttempts:   8, // a crash at every step boundary costs an attempt each
			Compensations: g.Compensations(),
			Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		return func(ctx context.Context, o Order) adapter.Delivery[string] {
			g.CatchUp(ctx, g.Clk)
			return adapter.Bind(rcv).Deliver(ctx, o)
		}, err
	})
	rep, err := deduptest.Run(t.Context(), g.Clk, service, orders, &deduptest.Options[Order]{
		Copies: 3, Workers: 4, Seed: 3, Lease: g.Lease, Tick: time.Millisecond, Idle: 20 * time.Millisecond,
		Timeout: 20 * time.Second,
		Faults:  []*deduptest.FaultStore{g.Faults},
		ID:      func(o Order) string { return o.ID },
		Steps:   g.Fx,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Ended) > 0 {
		t.Fatalf("the run must settle every copy\n%s", rep)
	}
	if rep.Replicas != 2 {
		t.Fatalf("%d replicas, want 2", rep.Replicas)
	}
	return rep
}

// Check asserts what the saga promises: no problem in the report (every
// fault fired, too), every step's effect once (but the reservation of an
// order out of stock: never), the charge of an order given up refunded
// once and nothing else compensated (refunds: whether the orders out of
// stock were charged at all), every copy of an order that goes through
// acknowledged with the charge's id, and every copy of one out of stock
// dead-lettered.
func Check(t testing.TB, rep *deduptest.Report[string], orders []Order, refunds bool) {
	t.Helper()
	if !rep.Check(t) {
		t.FailNow()
	}
	once := func(names ...string) map[string]int {
		m := map[string]int{}
		for _, n := range names {
			m[n] = 1
		}
		return m
	}
	for _, o := range orders {
		m := rep.Message(o.ID)
		if o.OutOfStock {
			if refunds && (!maps.Equal(m.Steps, once("charge")) || !maps.Equal(m.Compensations, once("charge"))) {
				t.Fatalf("%s: steps %v, compensations %v; want the charge once, refunded once\n%s", o.ID, m.Steps, m.Compensations, rep)
			}
			if m.DeadLettered != 3 || m.Acked != 0 {
				t.Fatalf("%s: %d dead-lettered, %d acked; want 3 and 0\n%s", o.ID, m.DeadLettered, m.Acked, rep)
			}
			continue
		}
		if !maps.Equal(m.Steps, once("charge", "reserve", "notify")) || len(m.Compensations) > 0 {
			t.Fatalf("%s: steps %v, compensations %v; want each step once, nothing compensated\n%s", o.ID, m.Steps, m.Compensations, rep)
		}
		if m.Acked != 3 || m.DeadLettered != 0 {
			t.Fatalf("%s: %d acked, %d dead-lettered; want 3 and 0\n%s", o.ID, m.Acked, m.DeadLettered, rep)
		}
		for _, v := range m.Replayed() {
			if v != "ch_"+o.ID {
				t.Fatalf("%s: a duplicate got %q, not the stored result\n%s", o.ID, v, rep)
			}
		}
	}
}

// CrashedAttempts returns the attempts of the message's deliveries that
// crashed.
func CrashedAttempts(m *deduptest.MessageReport[string]) map[int]bool {
	out := map[int]bool{}
	for _, d := range m.Deliveries {
		if d.Crashed {
			out[d.Attempt] = true
		}
	}
	return out
}

// CrashesBetweenSteps runs the saga, on rigs newRig makes, without a
// fault, with a worker dying after the Nth step record of every order (a
// run per boundary, the refund's records included), and at every boundary
// at once: each step's effect happens once, each refund once, nothing is
// compensated that did not happen, every good order is acknowledged and
// every one out of stock dead-lettered.
func CrashesBetweenSteps(t *testing.T, newRig func(t *testing.T, faults ...deduptest.Fault) *Rig) {
	t.Run("no fault", func(t *testing.T) {
		t.Parallel()
		g := newRig(t)
		rep := g.Run(t, g.Handler, Orders())
		Check(t, rep, Orders(), true)
		for _, o := range Orders() {
			if n := len(CrashedAttempts(rep.Message(o.ID))); n != 0 {
				t.Fatalf("%s: %d crashed attempts without a fault\n%s", o.ID, n, rep)
			}
		}
	})
	most := 0
	for _, o := range Orders() {
		most = max(most, Saves(o))
	}
	for n := 1; n <= most; n++ {
		t.Run(fmt.Sprintf("crash after step record %d", n), func(t *testing.T) {
			t.Parallel()
			var faults []deduptest.Fault
			for _, o := range Orders() {
				if n <= Saves(o) {
					faults = append(faults, deduptest.Fault{Op: deduptest.OpSaveStep, Kind: deduptest.Crash, Key: o.ID, Calls: []int{n}})
				}
			}
			g := newRig(t, faults...)
			rep := g.Run(t, g.Handler, Orders())
			Check(t, rep, Orders(), true)
			if got := len(g.Faults.Injected()); got != len(faults) {
				t.Fatalf("%d faults injected, want %d\n%s", got, len(faults), rep)
			}
			for _, in := range g.Faults.Injected() {
				_, id := store.SplitKey(in.Key)
				if in.Call != n || len(CrashedAttempts(rep.Message(id))) != 1 {
					t.Fatalf("%s: a crash at call %d, %d crashed attempts; want call %d, one\n%s", id, in.Call, len(CrashedAttempts(rep.Message(id))), n, rep)
				}
			}
		})
	}
	t.Run("crash at every boundary", func(t *testing.T) {
		t.Parallel()
		g := newRig(t, deduptest.Fault{Op: deduptest.OpSaveStep, Kind: deduptest.Crash})
		rep := g.Run(t, g.Handler, Orders())
		Check(t, rep, Orders(), true)
		perKey := map[string]int{}
		for _, in := range g.Faults.Injected() {
			perKey[in.Key]++
		}
		for _, o := range Orders() {
			if perKey["orders:"+o.ID] != Saves(o) || len(CrashedAttempts(rep.Message(o.ID))) != Saves(o) {
				t.Fatalf("%s: %d crashes, %d crashed attempts; want one per step record, %d\n%s", o.ID, perKey["orders:"+o.ID], len(CrashedAttempts(rep.Message(o.ID))), Saves(o), rep)
			}
		}
	})
}
