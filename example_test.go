package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/store/memstore"
)

type Payment struct {
	OrderID string
	Cents   int
}

type Receipt struct {
	ChargeID string
}

// A payment is charged once, however often it is delivered.
func ExampleReceiver_Handle() {
	st, err := memstore.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	charges := 0
	rcv, err := dedup.NewReceiver(st,
		func(p Payment) (string, error) { return p.OrderID, nil },
		func(ctx context.Context, p Payment) (Receipt, error) {
			charges++
			return Receipt{ChargeID: fmt.Sprintf("ch_%d", charges)}, nil
		},
		&dedup.Config{Namespace: "billing"})
	if err != nil {
		log.Fatal(err)
	}

	for range 3 { // the broker delivers the same message three times
		res, err := rcv.Handle(context.Background(), Payment{OrderID: "order-42", Cents: 1999})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.Status, res.Value.ChargeID)
	}
	fmt.Println("charges:", charges)
	// Output:
	// processed ch_1
	// duplicate ch_1
	// duplicate ch_1
	// charges: 1
}

// Decide turns every outcome into what the broker should do with the
// delivery; adapters map it onto ack, nak-with-delay and dead-letter.
func ExampleReceiver_Decide() {
	st, _ := memstore.New(nil)
	rcv, _ := dedup.NewReceiver(st,
		func(p Payment) (string, error) { return p.OrderID, nil },
		func(ctx context.Context, p Payment) (Receipt, error) {
			if p.Cents <= 0 {
				return Receipt{}, dedup.Permanent(errors.New("invalid amount"))
			}
			return Receipt{ChargeID: "ch_1"}, nil
		}, nil)

	for _, p := range []Payment{{"order-1", 500}, {"order-1", 500}, {"order-2", -1}, {"", 100}} {
		res, err := rcv.Handle(context.Background(), p)
		d := adapter.Bind(rcv).Decide(res, err)
		fmt.Printf("%-8q %-11s %s\n", p.OrderID, d.Action, d.Reason)
	}
	// Output:
	// "order-1" ack         processed
	// "order-1" ack         duplicate
	// "order-2" dead-letter permanent-error
	// ""       dead-letter no-key
}

// HandleBatch claims a whole batch in one store round trip and completes it
// in another; duplicates inside the batch follow their first copy.
func ExampleReceiver_HandleBatch() {
	st, _ := memstore.New(nil)
	rcv, _ := dedup.NewReceiver(st,
		func(p Payment) (string, error) { return p.OrderID, nil },
		func(ctx context.Context, p Payment) (int, error) { return p.Cents, nil }, nil)

	batch := []Payment{{"a", 100}, {"b", 200}, {"a", 100}}
	for i, out := range rcv.HandleBatch(context.Background(), batch) {
		fmt.Println(batch[i].OrderID, out.Result.Status, out.Result.Value, out.Err)
	}
	// Output:
	// a processed 100 <nil>
	// b processed 200 <nil>
	// a duplicate 100 <nil>
}
