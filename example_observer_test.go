package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store/memstore"
)

// An Observer hears of every delivery once, with everything about it: its
// status, the decision and whether it was carried out. A loop of your own
// (or an adapter) gets a Delivery from Deliver, carries out its Decision
// and reports it with Settled. The observer is called on the delivery's
// goroutine, so it must be quick and safe for concurrent use: count,
// record a span, log, and return.
func ExampleObserver() {
	var mu sync.Mutex
	byStatus := map[delivery.Status]int{} // a metric: deliveries by status
	obs := delivery.ObserverFunc(func(ctx context.Context, e delivery.Event) {
		mu.Lock()
		byStatus[e.Status]++
		mu.Unlock()
		if e.Err != nil {
			fmt.Println(e.Key, "failed:", errors.Unwrap(e.Err))
		}
		fmt.Println(e.Key, e.Decision.Action, e.Decision.Reason, "settled:", e.Settled, "stored:", e.Stored)
	})

	st, err := memstore.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	rcv, err := dedup.NewReceiver(st,
		func(p Payment) (string, error) { return p.OrderID, nil },
		func(ctx context.Context, p Payment) (Receipt, error) {
			if p.Cents <= 0 {
				return Receipt{}, errors.New("nothing to charge")
			}
			return Receipt{ChargeID: "ch_" + p.OrderID}, nil
		},
		&dedup.Config{Namespace: "billing", Observer: obs})
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	for _, p := range []Payment{{"order-1", 500}, {"order-1", 500}, {"order-2", 0}} {
		d := adapter.Bind(rcv).Deliver(ctx, p)
		// ... carry out d.Decision (ack, retry after d.Decision.Delay, dead
		// letter), then report it:
		d.Settled(adapter.Settlement{})
	}
	mu.Lock()
	defer mu.Unlock()
	fmt.Println("processed:", byStatus[delivery.StatusProcessed], "duplicate:", byStatus[delivery.StatusDuplicate])
	// Output:
	// billing:order-1 ack processed settled: true stored: true
	// billing:order-1 ack duplicate settled: true stored: true
	// billing:order-2 failed: nothing to charge
	// billing:order-2 retry handler-error settled: true stored: false
	// processed: 1 duplicate: 1
}
