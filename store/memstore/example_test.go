package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
)

// A message's key is claimed, its result stored, and a redelivery answered
// with that result instead of running the handler again.
func Example() {
	clk := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	s, err := memstore.New(&memstore.Options{Capacity: 1000, Clock: clk})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	req := store.AcquireRequest{Key: "billing:order-42", Lease: 30 * time.Second}

	first, _ := s.Acquire(ctx, req)
	fmt.Println("first delivery acquired:", first.Acquired, "attempt", first.Record.Attempt)

	// While the handler runs, a redelivery finds the key in flight.
	dup, _ := s.Acquire(ctx, req)
	fmt.Println("redelivery acquired:", dup.Acquired, "state", dup.Record.State)

	_ = s.Complete(ctx, store.CompleteRequest{
		Key:       "billing:order-42",
		Token:     first.Token,
		Result:    []byte(`"charged"`),
		Retention: 24 * time.Hour,
	})

	// After completion a duplicate gets the stored result, from memory.
	rec := s.Peek("billing:", "order-42")
	fmt.Println("duplicate answered:", rec != nil, string(rec.Result))

	// After the retention the key is forgotten.
	clk.Advance(24 * time.Hour)
	again, _ := s.Acquire(ctx, req)
	fmt.Println("a day later acquired:", again.Acquired, "attempt", again.Record.Attempt)
	// Output:
	// first delivery acquired: true attempt 1
	// redelivery acquired: false state processing
	// duplicate answered: true "charged"
	// a day later acquired: true attempt 1
}

// Scan lists the records under a prefix, as an operator's tool would.
func ExampleStore_Scan() {
	s, err := memstore.New(nil)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, id := range []string{"order-2", "order-1"} {
		_, _ = s.Acquire(ctx, store.AcquireRequest{Key: "billing:" + id, Lease: time.Minute})
	}
	_, _ = s.Acquire(ctx, store.AcquireRequest{Key: "shipping:order-1", Lease: time.Minute})

	for rec, err := range s.Scan(ctx, "billing:") {
		if err != nil {
			panic(err)
		}
		fmt.Println(rec.Key, rec.State)
	}
	// Output:
	// billing:order-1 processing
	// billing:order-2 processing
}
