package deduptest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
)

// Order is a payment request; Tag is the broker's delivery tag, new on
// every delivery.
type Order struct {
	ID     string
	Amount int
	Tag    int64
}

// provider is a payment provider: charges counts every charge.
type provider struct {
	charges deduptest.Effects
	mu      sync.Mutex
	seen    map[string]bool
}

// charge charges an order; with an idempotency key, the provider charges
// a key once.
func (p *provider) charge(order Order, idempotencyKey string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if idempotencyKey != "" {
		if p.seen == nil {
			p.seen = map[string]bool{}
		}
		if p.seen[idempotencyKey] {
			return
		}
		p.seen[idempotencyKey] = true
	}
	p.charges.Record(order.ID)
}

// flaky fails the first call per order: a step that fails once.
type flaky struct {
	mu    sync.Mutex
	tried map[string]bool
}

func (f *flaky) step(id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tried == nil {
		f.tried = map[string]bool{}
	}
	if !f.tried[id] {
		f.tried[id] = true
		return errors.New("ledger unavailable")
	}
	return nil
}

// replicas builds, for each process of the service, its receiver over
// the shared store s on clk, keyed by key, bound as an adapter binds it
// (adapter.Bind): what Run delivers to.
func replicas(clk *clock.Fake, s store.Store, key dedup.KeyFunc[Order], h dedup.Handler[Order, string]) deduptest.Target[Order, string] {
	return deduptest.Replicas(func(replica int) (*adapter.Receiver[Order, string], error) {
		rcv, err := dedup.NewReceiver(s, key, h, &dedup.Config{
			Namespace: "payments", Lease: 10 * time.Second, Clock: clk,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			return nil, err
		}
		return adapter.Bind(rcv), nil
	})
}

func byID(o Order) (string, error) { return o.ID, nil }

func orders() []Order { return []Order{{ID: "o1", Amount: 100}, {ID: "o2", Amount: 250}} }

func summarize(rep *deduptest.Report[string]) {
	for _, m := range rep.Messages {
		fmt.Printf("%s: charged %d time(s), handler ran %d time(s), %d of 3 copies acked\n", m.ID, m.Effects, m.Runs, m.Acked)
	}
	for _, p := range rep.Problems {
		fmt.Printf("problem: %s %s\n", p.ID, p.Kind)
	}
	if rep.Err() == nil {
		fmt.Println("ok")
	}
}

// A safe payment handler: the step that may fail comes before the
// charge, so a retry never charges twice.
func ExampleRun_safe() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	mem, _ := memstore.New(&memstore.Options{Clock: clk})
	var psp provider
	var ledger flaky
	service := replicas(clk, mem, byID, func(ctx context.Context, o Order) (string, error) {
		if err := ledger.step(o.ID); err != nil {
			return "", err // nothing charged yet
		}
		psp.charge(o, "")
		return "receipt-" + o.ID, nil
	})
	// Two processes (Options.Replicas' default) share the store.
	rep, err := deduptest.Run(context.Background(), clk, service, orders(), &deduptest.Options[Order]{
		ID: func(o Order) string { return o.ID }, Effects: psp.charges.Count, Lease: 10 * time.Second, Workers: 1,
	})
	if err != nil {
		panic(err)
	}
	summarize(rep)
	// Output:
	// o1: charged 1 time(s), handler ran 2 time(s), 3 of 3 copies acked
	// o2: charged 1 time(s), handler ran 2 time(s), 3 of 3 copies acked
	// ok
}

// One process: a receiver handed to Run directly, bound as an adapter
// binds it (adapter.Bind). Its copies wait for the first in the process
// and are answered with its outcome.
func ExampleRun_oneReceiver() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	mem, _ := memstore.New(&memstore.Options{Clock: clk})
	var psp provider
	rcv, err := dedup.NewReceiver(mem, byID, func(ctx context.Context, o Order) (string, error) {
		psp.charge(o, "")
		return "receipt-" + o.ID, nil
	}, &dedup.Config{
		Namespace: "payments", Lease: 10 * time.Second, Clock: clk,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		panic(err)
	}
	rep, err := deduptest.Run(context.Background(), clk, adapter.Bind(rcv), orders(), &deduptest.Options[Order]{
		ID: func(o Order) string { return o.ID }, Effects: psp.charges.Count, Lease: 10 * time.Second, Workers: 1,
	})
	if err != nil {
		panic(err)
	}
	summarize(rep)
	// Output:
	// o1: charged 1 time(s), handler ran 1 time(s), 3 of 3 copies acked
	// o2: charged 1 time(s), handler ran 1 time(s), 3 of 3 copies acked
	// ok
}

// An unsafe payment handler: it charges, then a step fails, and the retry
// charges again. The harness reports the double charge.
func ExampleRun_unsafe() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	mem, _ := memstore.New(&memstore.Options{Clock: clk})
	var psp provider
	var ledger flaky
	service := replicas(clk, mem, byID, func(ctx context.Context, o Order) (string, error) {
		psp.charge(o, "")
		if err := ledger.step(o.ID); err != nil {
			return "", err // charged, yet retried
		}
		return "receipt-" + o.ID, nil
	})
	rep, _ := deduptest.Run(context.Background(), clk, service, orders(), &deduptest.Options[Order]{
		ID: func(o Order) string { return o.ID }, Effects: psp.charges.Count, Lease: 10 * time.Second, Workers: 1,
	})
	summarize(rep)
	// Output:
	// o1: charged 2 time(s), handler ran 2 time(s), 3 of 3 copies acked
	// o2: charged 2 time(s), handler ran 2 time(s), 3 of 3 copies acked
	// problem: o1 double-effect
	// problem: o2 double-effect
}

// The crash mode: a worker dies between the charge and the record (a
// Crash fault drops o1's first completion), and the redelivery after the
// lease charges again, unless the charge carries an idempotency key the
// provider honours (the message id).
func ExampleRun_crash() {
	for _, idempotent := range []bool{false, true} {
		clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		mem, _ := memstore.New(&memstore.Options{Clock: clk})
		fs, _ := deduptest.NewFaultStore(mem, 1, deduptest.Fault{
			Op: deduptest.OpComplete, Kind: deduptest.Crash, Key: "o1", Calls: []int{1},
		})
		var psp provider
		service := replicas(clk, fs, byID, func(ctx context.Context, o Order) (string, error) {
			key := ""
			if idempotent {
				key = o.ID
			}
			psp.charge(o, key)
			return "receipt-" + o.ID, nil
		})
		rep, _ := deduptest.Run(context.Background(), clk, service, orders(), &deduptest.Options[Order]{
			ID: func(o Order) string { return o.ID }, Effects: psp.charges.Count, Lease: 10 * time.Second, Workers: 1,
			Faults: []*deduptest.FaultStore{fs}, // a fault that never fired is a problem
		})
		fmt.Println("idempotency key:", idempotent)
		summarize(rep)
		_ = fs.Close()
	}
	// Output:
	// idempotency key: false
	// o1: charged 2 time(s), handler ran 2 time(s), 3 of 3 copies acked
	// o2: charged 1 time(s), handler ran 1 time(s), 3 of 3 copies acked
	// problem: o1 double-effect
	// idempotency key: true
	// o1: charged 1 time(s), handler ran 2 time(s), 3 of 3 copies acked
	// o2: charged 1 time(s), handler ran 1 time(s), 3 of 3 copies acked
	// ok
}

// A key on a field that differs between copies (the broker's delivery
// tag): every copy is a new message to the receiver, and each charges.
// The report names the cause, with two of the keys.
func ExampleRun_keyDiffersBetweenCopies() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	mem, _ := memstore.New(&memstore.Options{Clock: clk})
	var psp provider
	byTag := func(o Order) (string, error) { return fmt.Sprint("tag-", o.Tag), nil }
	service := replicas(clk, mem, byTag, func(ctx context.Context, o Order) (string, error) {
		psp.charge(o, "")
		return "receipt-" + o.ID, nil
	})
	// The broker stamps each delivery with a new tag.
	var tags atomic.Int64
	broker := deduptest.TargetFunc[Order, string](func(ctx context.Context, o Order) adapter.Delivery[string] {
		o.Tag = tags.Add(1)
		return service.Deliver(ctx, o)
	})
	rep, _ := deduptest.Run(context.Background(), clk, broker, orders()[:1], &deduptest.Options[Order]{
		ID: func(o Order) string { return o.ID }, Effects: psp.charges.Count, Lease: 10 * time.Second, Workers: 1,
	})
	summarize(rep)
	fmt.Println(rep.ProblemsOf(deduptest.KeyDiffers)[0])
	// Output:
	// o1: charged 3 time(s), handler ran 3 time(s), 3 of 3 copies acked
	// problem: o1 key-differs
	// problem: o1 double-effect
	// message o1: key-differs: copies of the message got different keys ("payments:tag-1" for copy 1, "payments:tag-2" for copy 2; 3 keys in all), each a new message to the receiver: take the key from what every copy carries alike (the producer's id, a hash of the fields that do not change between sends), not from a delivery tag or a send time
}

// A saga of recorded steps (dedup.Step): charge, then reserve, each run
// at most once per order; an order out of stock is given up, and its
// charge refunded (Config.Compensations). The step counters
// (Options.Steps) count each step's effect and each refund; a worker
// crashes between o1's charge and its reservation (a Crash fault on o1's
// first step record), and the redelivery after the lease replays the
// charge instead of charging again.
func ExampleRun_saga() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	mem, _ := memstore.New(&memstore.Options{Clock: clk})
	fs, _ := deduptest.NewFaultStore(mem, 1, deduptest.Fault{
		Op: deduptest.OpSaveStep, Kind: deduptest.Crash, Key: "o1", Calls: []int{1},
	})
	var steps deduptest.Effects
	handler := func(ctx context.Context, o Order) (string, error) {
		chargeID, err := dedup.Step(ctx, "charge", func(ctx context.Context) (string, error) {
			steps.Step(o.ID, "charge")
			return "ch-" + o.ID, ctx.Err()
		})
		if err != nil {
			return "", err
		}
		if _, err := dedup.Step(ctx, "reserve", func(ctx context.Context) (int, error) {
			if o.Amount > 200 {
				return 0, dedup.Permanent(errors.New("out of stock"))
			}
			steps.Step(o.ID, "reserve")
			return 1, ctx.Err()
		}); err != nil {
			return "", err
		}
		return "receipt-" + chargeID, nil
	}
	refund := dedup.Compensate(func(ctx context.Context, o Order, chargeID string) error {
		steps.Compensation(o.ID, "charge") // the refund of chargeID
		return ctx.Err()
	})
	service := deduptest.Replicas(func(int) (*adapter.Receiver[Order, string], error) {
		rcv, err := dedup.NewReceiver(fs, byID, handler, &dedup.Config{
			Namespace: "payments", Lease: 10 * time.Second, Clock: clk,
			Compensations: dedup.Compensations{"charge": refund},
			Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			return nil, err
		}
		return adapter.Bind(rcv), nil
	})
	rep, _ := deduptest.Run(context.Background(), clk, service, orders(), &deduptest.Options[Order]{
		ID: func(o Order) string { return o.ID }, Steps: &steps, Lease: 10 * time.Second, Workers: 1,
		Faults: []*deduptest.FaultStore{fs},
	})
	for _, m := range rep.Messages {
		fmt.Printf("%s: charged %d, reserved %d, refunded %d; %d copies acked, %d dead-lettered\n",
			m.ID, m.Steps["charge"], m.Steps["reserve"], m.Compensations["charge"], m.Acked, m.DeadLettered)
	}
	fmt.Println("crashed:", fs.Injected())
	if rep.Err() == nil {
		fmt.Println("ok")
	}
	_ = fs.Close()
	// Output:
	// o1: charged 1, reserved 1, refunded 0; 3 copies acked, 0 dead-lettered
	// o2: charged 1, reserved 0, refunded 1; 0 copies acked, 3 dead-lettered
	// crashed: [crash save-step on "payments:o1" (call 1)]
	// ok
}
