package dedup

import "context"

// Consumer is the lifecycle every broker adapter's consumer has
// (dedupnats.Consumer and Subscriber, dedupamqp.Consumer,
// dedupkafka.Consumer), so that an application starts, watches and stops
// all of its consumers the same way:
//
//	for _, c := range []dedup.Consumer{orders, refunds} {
//		if err := c.Start(ctx); err != nil { ... }
//	}
//	...
//	for _, c := range consumers {
//		_ = c.Stop(shutdownCtx) // drains: every delivery handed out is settled
//	}
type Consumer interface {
	// Start connects and starts consuming. It returns once the consumer
	// runs, or the error that kept it from starting; a consumer starts
	// once (a second Start fails).
	Start(ctx context.Context) error
	// Stop stops taking deliveries, waits until every delivery handed to
	// the receiver is settled, and releases what Start made. At ctx's end
	// it stops waiting (what is unsettled goes back to the broker) and
	// returns ctx's error. Stop before Start, or twice, does nothing.
	Stop(ctx context.Context) error
	// Stopped is closed once the consumer stopped: by Stop, or on its own
	// after an error it cannot recover from (Err says which).
	Stopped() <-chan struct{}
	// Err is the error the consumer stopped on, nil while it runs and
	// after a Stop.
	Err() error
	// Stats counts what the consumer did with its deliveries.
	Stats() ConsumerStats
}
