package dedup_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/store/memstore"
)

// A graceful shutdown on a signal, in a consumer loop of your own: the
// signal stops the intake, not the work in progress. The handler that is
// running when it comes finishes and its delivery is settled; what was not
// taken yet stays with the broker, which delivers it again later (and the
// store answers it if it was done). The handlers' context is ended only by
// the drain's own deadline: then Handle returns ErrCanceled and Decide says
// Retry.
//
// The broker adapters (dedupnats, dedupkafka, dedupamqp) do this in Stop:
// Start them on a context only Stop ends, and call Stop with a deadline of
// its own when the signal comes.
func Example_gracefulShutdown() {
	// In a program, the signal is
	//
	//	sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	//	defer stop()
	//
	// Here the example sends it itself, while the first order is handled.
	sig, interrupt := context.WithCancel(context.Background())
	defer interrupt()

	deliveries := make(chan Payment, 3) // stands in for the broker
	for _, id := range []string{"order-1", "order-2", "order-3"} {
		deliveries <- Payment{OrderID: id, Cents: 500}
	}

	running, finish := make(chan struct{}), make(chan struct{})
	st, err := memstore.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	rcv, err := dedup.NewReceiver(st,
		func(p Payment) (string, error) { return p.OrderID, nil },
		func(ctx context.Context, p Payment) (Receipt, error) {
			close(running) // the first order only: the loop stops after it
			select {       // a handler that takes a while, and honours its context
			case <-finish:
				return Receipt{ChargeID: "ch_" + p.OrderID}, nil
			case <-ctx.Done():
				return Receipt{}, context.Cause(ctx)
			}
		},
		&dedup.Config{Namespace: "billing"})
	if err != nil {
		log.Fatal(err)
	}

	// The handlers' context: not the signal's.
	work, hardStop := context.WithCancel(context.Background())
	defer hardStop()
	stopped := make(chan struct{})
	go func() { // the consumer loop, one worker
		defer close(stopped)
		for sig.Err() == nil { // no new delivery once the signal came
			select {
			case p := <-deliveries:
				res, err := rcv.Handle(work, p)
				d := adapter.Bind(rcv).Decide(res, err)
				fmt.Println(p.OrderID, d.Action, d.Reason) // ack, nak with d.Delay, or dead-letter
			case <-sig.Done():
			}
		}
	}()

	<-running
	interrupt() // SIGTERM, while order-1 is being handled
	close(finish)

	// The drain: wait for the loop, up to a deadline of its own; past it,
	// cancel the handlers (their deliveries are retried).
	<-sig.Done()
	drain, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	select {
	case <-stopped:
	case <-drain.Done():
		hardStop()
		<-stopped
	}
	fmt.Println("left with the broker:", len(deliveries))
	// Output:
	// order-1 ack processed
	// left with the broker: 2
}
