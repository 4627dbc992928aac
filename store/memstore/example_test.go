package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/store/memstore"
)

// A message's key is claimed, its result stored, and a redelivery answered
// with that result instead of running the handler again.
func Example() {
	clk := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	store, err := memstore.New(&memstore.Options{Capacity: 1000, Clock: clk})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	req := dedup.AcquireRequest{Lease: 30 * time.Second}

	first, _ := store.Acquire(ctx, "billing:order-42", req)
	fmt.Println("first delivery acquired:", first.Acquired, "attempt", first.Record.Attempt)

	// While the handler runs, a redelivery finds the key in flight.
	dup, _ := store.Acquire(ctx, "billing:order-42", req)
	fmt.Println("redelivery acquired:", dup.Acquired, "state", dup.Record.State)

	_ = store.Complete(ctx, "billing:order-42", first.Token, []byte(`"charged"`), 24*time.Hour)

	// After completion a duplicate gets the stored result, from memory.
	rec := store.Peek("billing:", "order-42")
	fmt.Println("duplicate answered:", rec != nil, string(rec.Result))

	// After the retention the key is forgotten.
	clk.Advance(25 * time.Hour)
	again, _ := store.Acquire(ctx, "billing:order-42", req)
	fmt.Println("a day later acquired:", again.Acquired, "attempt", again.Record.Attempt)
	// Output:
	// first delivery acquired: true attempt 1
	// redelivery acquired: false state processing
	// duplicate answered: true "charged"
	// a day later acquired: true attempt 1
}
