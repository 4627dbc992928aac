package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/store/redisstore"
)

// Two replicas of a consumer on one Redis share their records: a message
// redelivered to the other replica is answered as a duplicate, with the
// first one's result. It runs against the Redis at 127.0.0.1:6379, under a
// prefix of its own; with Redis down it prints why and fails.
func Example() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()

	prefix := "dedup-example-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	store, err := redisstore.New(ctx, client, &redisstore.Options{Prefix: prefix, Timeout: time.Second})
	if errors.Is(err, dedup.ErrStoreUnavailable) {
		fmt.Println("Redis is down:", err)
		return
	} else if err != nil {
		panic(err)
	}

	type Order struct{ ID string }
	replica := func(name string) *dedup.Receiver[Order, string] {
		rcv, err := dedup.NewReceiver(store,
			func(o Order) (string, error) { return o.ID, nil },
			func(ctx context.Context, o Order) (string, error) { return "charged " + o.ID + " on " + name, nil },
			&dedup.Config{Namespace: "billing"})
		if err != nil {
			panic(err)
		}
		return rcv
	}
	a, b := replica("a"), replica("b")

	for _, rcv := range []*dedup.Receiver[Order, string]{a, b} {
		res, err := rcv.Handle(ctx, Order{ID: "o-1"})
		d := adapter.Bind(rcv).Decide(res, err)
		fmt.Println(res.Status, res.Value, d.Action)
	}
	// Clean up: Forget deletes the record (redisstore is a store.Inspector).
	if err := a.Forget(ctx, "o-1"); err != nil {
		panic(err)
	}
	// Output:
	// processed charged o-1 on a ack
	// duplicate charged o-1 on a ack
}
