// Command quickstart shows dedup at work without any external service: it
// plays an at-least-once broker against a payment handler backed by the
// in-process memstore, and prints what happened.
//
//	go run ./examples/quickstart
//
// The broker redelivers messages, delivers some concurrently, and one worker
// freezes mid-handler (as a crashed process would) so that its lease expires
// and a redelivery takes the order over. Each order is charged once, and
// every duplicate is answered with the first receipt.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/store/memstore"
)

// Order is the message the producers publish.
type Order struct {
	ID    string `json:"id"`
	Cents int    `json:"cents"`
}

// Receipt is what charging an order returns, and what duplicates replay.
type Receipt struct {
	ChargeID string `json:"charge_id"`
	Cents    int    `json:"cents"`
}

// gateway is the payment provider: its charges are the side effect that must
// happen once per order.
type gateway struct {
	mu      sync.Mutex
	charges map[string][]string // order id -> charge ids
	next    int
}

func (g *gateway) charge(o Order) Receipt {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.next++
	id := fmt.Sprintf("ch_%03d", g.next)
	g.charges[o.ID] = append(g.charges[o.ID], id)
	return Receipt{ChargeID: id, Cents: o.Cents}
}

const lease = 30 * time.Second

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// run plays the scenario and writes its report to w.
func run(ctx context.Context, w io.Writer) error {
	// One fake clock drives the store's leases, so the crash below takes no
	// real 30 seconds.
	clk := clock.NewFake(time.Now())
	store, err := memstore.New(&memstore.Options{Clock: clk})
	if err != nil {
		return err
	}
	gw := &gateway{charges: map[string][]string{}}
	charge := func(ctx context.Context, o Order) (Receipt, error) { return gw.charge(o), nil }
	byID := func(o Order) (string, error) { return o.ID, nil }
	cfg := &dedup.Config{Namespace: "billing", Lease: lease, Clock: clk, Logger: slog.New(slog.DiscardHandler)}
	rcv, err := dedup.NewReceiver(store, byID, charge, cfg)
	if err != nil {
		return err
	}

	orders := []Order{{"order-1", 1999}, {"order-2", 4500}, {"order-3", 1250}, {"order-4", 999}, {"order-5", 30000}}
	tally := newTally()
	deliver := func(who string, o Order) {
		res, err := rcv.Handle(ctx, o)
		tally.add(who, o, res, err, dedup.Decide(res, err, rcv.Policy()))
	}

	fmt.Fprintln(w, "1. Orders 1, 2, 4 and 5 are delivered, then the broker redelivers orders 1 and 2.")
	for _, o := range orders {
		if o.ID != "order-3" {
			deliver("worker-a", o)
		}
	}
	deliver("worker-b", orders[0])
	deliver("worker-b", orders[1])

	fmt.Fprintln(w, "2. A producer retry publishes order 3 eight times at once; eight workers take a copy each.")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { deliver(fmt.Sprintf("worker-%c", 'c'+i), orders[2]) })
	}
	wg.Wait()

	fmt.Fprintln(w, "3. Worker z freezes in the middle of charging order 6; its lease expires.")
	frozen := make(chan struct{})
	wake := make(chan struct{})
	// Worker z is another process: its own receiver, whose clock stands
	// still while it is frozen, so its heartbeat cannot save its lease.
	z, err := dedup.NewReceiver(store, byID, func(ctx context.Context, o Order) (Receipt, error) {
		close(frozen)
		<-wake // the gateway call hangs: no charge was made
		return Receipt{ChargeID: "ch_from_the_frozen_worker", Cents: o.Cents}, nil
	}, &dedup.Config{Namespace: "billing", Lease: lease, Clock: clock.NewFake(time.Now())})
	if err != nil {
		return err
	}
	order6 := Order{"order-6", 7700}
	var zRes dedup.Result[Receipt]
	var zErr error
	wg.Go(func() { zRes, zErr = z.Handle(ctx, order6) })
	<-frozen
	deliver("worker-a", order6) // the broker redelivers while z holds the lease: in flight
	clk.Advance(lease + time.Second)
	deliver("worker-a", order6) // the lease has expired: the redelivery takes over
	close(wake)
	wg.Wait()
	tally.add("worker-z", order6, zRes, zErr, dedup.Decide(zRes, zErr, z.Policy()))
	deliver("worker-b", order6)

	fmt.Fprintln(w, "4. A message without an order id arrives.")
	deliver("worker-a", Order{Cents: 100})

	fmt.Fprintln(w)
	tally.print(w, gw)
	return nil
}

// tally records what each delivery came to.
type tally struct {
	mu    sync.Mutex
	lines map[string][]string
	dead  []string
}

func newTally() *tally { return &tally{lines: map[string][]string{}} }

func (t *tally) add(who string, o Order, res dedup.Result[Receipt], err error, d dedup.Decision) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var line string
	switch {
	case d.Action == dedup.DeadLetter:
		t.dead = append(t.dead, fmt.Sprintf("%s: dead-lettered (%s): %v", who, d.Reason, err))
		return
	case errors.Is(err, dedup.ErrLeaseLost):
		line = fmt.Sprintf("%s: woke up after losing its lease: its result was refused (%s)", who, d.Action)
	case res.Status == dedup.StatusInFlight:
		line = fmt.Sprintf("%s: in flight elsewhere -> %s in %v", who, d.Action, d.Delay.Round(time.Second))
	default:
		line = fmt.Sprintf("%s: %-9s %s (attempt %d) -> %s", who, res.Status, res.Value.ChargeID, res.Attempt, d.Action)
	}
	t.lines[o.ID] = append(t.lines[o.ID], line)
}

func (t *tally) print(w io.Writer, gw *gateway) {
	ids := make([]string, 0, len(t.lines))
	for id := range t.lines {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		lines := t.lines[id]
		sort.Strings(lines) // concurrent deliveries finish in any order
		fmt.Fprintf(w, "%s  charged %d time(s): %v\n", id, len(gw.charges[id]), gw.charges[id])
		for _, l := range lines {
			fmt.Fprintln(w, "    "+l)
		}
	}
	for _, d := range t.dead {
		fmt.Fprintln(w, "poison  "+d)
	}
	once := true
	for _, id := range ids {
		once = once && len(gw.charges[id]) == 1
	}
	fmt.Fprintf(w, "\nEvery order charged exactly once: %v\n", once)
}
