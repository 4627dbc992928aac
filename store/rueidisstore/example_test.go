package rueidisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/rueidisstore"
)

// A store on a rueidis client: the first delivery of a message claims its
// key and completes it; a duplicate finds the completed record and its
// result.
func Example() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}, DisableCache: true})
	if err != nil {
		fmt.Println("no Redis:", err)
		return
	}
	defer client.Close()
	ctx := context.Background()
	s, err := rueidisstore.New(ctx, client, &rueidisstore.Options{Prefix: "dedup-example:"})
	if err != nil {
		fmt.Println(err)
		return
	}
	key := "billing:order-" + store.NewToken().String() // a fresh message id on every run
	defer func() { _ = client.Do(ctx, client.B().Del().Key(s.RedisKey(key)).Build()).Error() }()

	first, _ := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: 30 * time.Second})
	fmt.Println("first delivery acquired:", first.Acquired)
	_ = s.Complete(ctx, store.CompleteRequest{Key: key, Token: first.Token, Result: []byte("charged"), Retention: time.Hour})

	dup, _ := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: 30 * time.Second})
	fmt.Println("duplicate acquired:", dup.Acquired, "state:", dup.Record.State, "result:", string(dup.Record.Result))
	// Output:
	// first delivery acquired: true
	// duplicate acquired: false state: completed result: charged
}
