package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/store/memstore"
)

// An Observer hears of every delivery the receiver handled (EventHandled)
// and of what was done with it (EventSettled: every broker adapter reports
// its ack, retry or dead letter there; a loop of your own can too). It is
// called on the delivery's goroutine, so it must be quick and safe for
// concurrent use: count, record a span, log, and return.
func ExampleObserver() {
	var mu sync.Mutex
	handled := map[dedup.Status]int{} // a metric: deliveries by status
	obs := dedup.ObserverFunc(func(ctx context.Context, e dedup.Event) {
		switch e.Kind {
		case dedup.EventHandled:
			mu.Lock()
			handled[e.Status]++
			mu.Unlock()
			if e.Err != nil {
				fmt.Println("handled", e.Key, "failed:", errors.Unwrap(e.Err))
			}
		case dedup.EventSettled:
			fmt.Println("settled", e.Key, e.Decision.Action, e.Decision.Reason)
		}
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
		res, err := rcv.Handle(ctx, p) // reports EventHandled
		d := rcv.Decide(res, err)
		// ... carry out d (ack, retry after d.Delay, dead letter), then
		// report it as an adapter does:
		rcv.Observe(ctx, dedup.Event{Kind: dedup.EventSettled, Key: res.Key, Status: res.Status,
			Attempt: res.Attempt, Decision: d, Err: err})
	}
	mu.Lock()
	defer mu.Unlock()
	fmt.Println("processed:", handled[dedup.StatusProcessed], "duplicate:", handled[dedup.StatusDuplicate])
	// Output:
	// settled billing:order-1 ack processed
	// settled billing:order-1 ack duplicate
	// handled billing:order-2 failed: nothing to charge
	// settled billing:order-2 retry handler-error
	// processed: 1 duplicate: 1
}
