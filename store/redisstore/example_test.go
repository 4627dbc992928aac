package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/store/redisstore"
)

// A receiver on Redis: every replica of the consumer shares the records,
// so a message redelivered to another replica is answered as a duplicate.
func Example() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()

	store, err := redisstore.New(ctx, client, &redisstore.Options{Timeout: time.Second})
	if errors.Is(err, dedup.ErrStoreUnavailable) {
		fmt.Println("Redis is down:", err)
		return
	}
	type Order struct{ ID string }
	rcv, err := dedup.NewReceiver(store,
		func(o Order) (string, error) { return o.ID, nil },
		func(ctx context.Context, o Order) (string, error) { return "charged " + o.ID, nil },
		&dedup.Config{Namespace: "billing"})
	if err != nil {
		panic(err)
	}
	res, err := rcv.Handle(ctx, Order{ID: "o-1"})
	d := rcv.Decide(res, err)
	fmt.Println(res.Status, res.Value, d.Action)
}
