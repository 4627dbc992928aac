package dedupwatermill_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/dedup-go/dedup"
	dedupwatermill "github.com/dedup-go/dedup/middleware/watermill"
	"github.com/dedup-go/dedup/store/memstore"
)

// A router whose handler runs once per message UUID: the producer's
// duplicate is answered with the first delivery's produced message (same
// UUID), which the router publishes again for the next consumer to
// deduplicate. Dead letters go to Watermill's poison queue.
func Example() {
	st, _ := memstore.New(nil) // redisstore, pgstore... across instances
	mw, err := dedupwatermill.New(st, &dedupwatermill.Options{
		Config: &dedup.Config{Namespace: "billing", Logger: slog.New(slog.DiscardHandler)},
	})
	if err != nil {
		panic(err)
	}
	ps := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer ps.Close()
	out, _ := ps.Subscribe(context.Background(), "receipts")

	router, _ := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	poison, _ := middleware.PoisonQueueWithFilter(ps, "poison", dedupwatermill.IsPoison)
	// Poison queue outside, Retry inside: see the package documentation.
	router.AddMiddleware(poison, mw.Middleware, middleware.Retry{MaxRetries: 2}.Middleware)
	router.AddHandler("charge", "orders", ps, "receipts", ps, func(msg *message.Message) ([]*message.Message, error) {
		fmt.Println("charged", string(msg.Payload))
		return message.Messages{message.NewMessage("receipt-"+msg.UUID, msg.Payload)}, nil
	})
	go func() { _ = router.Run(context.Background()) }()
	<-router.Running()
	defer router.Close()

	for range 2 { // the producer publishes order 42 twice
		_ = ps.Publish("orders", message.NewMessage("order-42", []byte("42")))
	}
	for range 2 {
		r := <-out
		fmt.Println("receipt", r.UUID)
		r.Ack()
	}
	// Output:
	// charged 42
	// receipt receipt-order-42
	// receipt receipt-order-42
}
