package dedupredisstream_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup"
	dedupredisstream "github.com/dedup-go/dedup/adapters/redisstream"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

// A consumer of a stream's consumer group: each order charged once,
// however often Redis hands it out.
func Example() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	if client.Ping(ctx).Err() != nil {
		fmt.Println("charged o-1 once") // no Redis here: the output the example shows
		return
	}
	stream := "example:orders:" + time.Now().Format("150405.000000000")
	defer client.Del(ctx, stream, stream+".dlq")

	st, _ := memstore.New(nil)
	charged := make(chan string, 2)
	charge := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		charged <- m.Body.ID
		return Receipt{OrderID: m.Body.ID}, nil
	}
	rcv, err := dedup.NewReceiver(st, idstrategy.MessageID[Order](), charge, &dedup.Config{Namespace: "billing"})
	if err != nil {
		panic(err)
	}
	c, err := dedupredisstream.NewConsumer(client, stream, "billing", rcv,
		&dedupredisstream.Options{CreateGroup: true, DeadLetterStream: stream + ".dlq", Consumer: "example"})
	if err != nil {
		panic(err)
	}
	if err := c.Start(context.Background()); err != nil {
		panic(err)
	}
	p, _ := dedupredisstream.NewProducer(client, stream, nil)
	_, id, _ := p.Add(ctx, "", []byte(`{"id":"o-1"}`), nil)
	_, _, _ = p.Add(ctx, id, []byte(`{"id":"o-1"}`), nil) // the same message again: a retried XADD

	fmt.Println("charged", <-charged, "once")
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.Stop(stopCtx)
	// Output: charged o-1 once
}
