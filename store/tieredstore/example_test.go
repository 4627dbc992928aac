package tieredstore_test

import (
	"context"
	"fmt"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/store/memstore"
	"github.com/dedup-go/dedup/store/tieredstore"
)

// A tiered store answers duplicates from memory once the remote store has
// confirmed the first delivery. Here the remote is a memstore standing in
// for Redis.
func Example() {
	remote, _ := memstore.New(nil) // redisstore.New(ctx, client, nil) in production
	store, err := tieredstore.New(remote, nil)
	if err != nil {
		panic(err)
	}
	rcv, err := dedup.NewReceiver(store,
		func(id string) (string, error) { return id, nil },
		func(ctx context.Context, id string) (string, error) { return "receipt for " + id, nil },
		&dedup.Config{Namespace: "billing"})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 3 {
		res, _ := rcv.Handle(ctx, "order-7")
		fmt.Println(res.Status, res.Value)
	}
	fmt.Println("answered from memory:", store.Stats().LocalHits)
	// Output:
	// processed receipt for order-7
	// duplicate receipt for order-7
	// duplicate receipt for order-7
	// answered from memory: 2
}
