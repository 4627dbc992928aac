package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
)

// Forget is the redrive path. A message that failed MaxAttempts times is
// dead-lettered, and its failed record stays for the retention, so a copy
// redriven from the dead letters would be dead-lettered again at once. Fix
// the bug, Forget the id (without the namespace), then redrive: the
// handler runs afresh. A message being processed is not forgotten.
func ExampleReceiver_Forget() {
	st, err := memstore.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	fixed := false // the bug in the handler, fixed later
	rcv, err := dedup.NewReceiver(st,
		func(p Payment) (string, error) { return p.OrderID, nil },
		func(ctx context.Context, p Payment) (Receipt, error) {
			if !fixed {
				return Receipt{}, errors.New("currency table missing")
			}
			return Receipt{ChargeID: "ch_1"}, nil
		},
		&dedup.Config{Namespace: "billing", MaxAttempts: 2})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	deliver := func() {
		res, err := rcv.Handle(ctx, Payment{OrderID: "order-42", Cents: 1999})
		d := adapter.Bind(rcv).Decide(res, err)
		fmt.Println(d.Action, d.Reason)
	}

	deliver() // attempt 1 fails: retried
	deliver() // attempt 2 fails: MaxAttempts, dead-lettered
	fixed = true
	deliver() // redriven before Forget: the failed record answers, dead-lettered again

	if err := rcv.Forget(ctx, "order-42"); err != nil { // the id, not "billing:order-42"
		log.Fatal(err)
	}
	deliver() // redriven after Forget: the handler runs
	deliver() // and a duplicate of it is answered from the new record

	// Forget never pulls a key from under a delivery running its handler
	// (here, another consumer's claim on order-43): it is refused with
	// ErrKeyHeld and deletes nothing. Forget again once it is done.
	if _, err := st.Acquire(ctx, store.AcquireRequest{Key: "billing:order-43", Lease: time.Minute}); err != nil {
		log.Fatal(err)
	}
	err = rcv.Forget(ctx, "order-43")
	fmt.Println(errors.Is(err, dedup.ErrKeyHeld))
	// Output:
	// retry handler-error
	// dead-letter attempts-exhausted
	// dead-letter attempts-exhausted
	// ack processed
	// ack duplicate
	// true
}
