package tieredstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
	"github.com/dedup-go/dedup/store/tieredstore"
)

// A tiered store answers duplicates from memory once the remote store has
// confirmed the first delivery. Here the remote is a memstore standing in
// for Redis, and the calls are the ones a dedup.Receiver makes.
func Example() {
	remote, _ := memstore.New(nil) // redisstore.New(ctx, client, nil) in production
	s, err := tieredstore.New(remote, nil)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	deliver := func(key string) {
		if rec := s.Peek(store.SplitKey(key)); rec != nil {
			fmt.Printf("duplicate from memory: %s\n", rec.Result)
			return
		}
		c, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: 30 * time.Second})
		if err != nil {
			panic(err)
		}
		if !c.Acquired {
			fmt.Printf("%s elsewhere: %s\n", c.Record.State, c.Record.Result)
			return
		}
		result := "receipt for " + key // the handler's effect, once
		err = s.Complete(ctx, store.CompleteRequest{Key: key, Token: c.Token, Result: []byte(result), Retention: 24 * time.Hour})
		if err != nil {
			panic(err)
		}
		fmt.Println("processed:", result)
	}
	for range 3 {
		deliver("billing:order-7")
	}
	fmt.Println("answered from memory:", s.Stats().LocalHits)
	// Output:
	// processed: receipt for billing:order-7
	// duplicate from memory: receipt for billing:order-7
	// duplicate from memory: receipt for billing:order-7
	// answered from memory: 2
}
