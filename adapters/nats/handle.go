package dedupnats

import (
	"context"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
)

// deliver decodes env's data into its Body and hands env to the receiver,
// as one delivery the adapter settles. A body that does not decode never
// reaches the receiver: it is Refused, with an error matching
// dedup.ErrUndecodable, which Decide dead-letters.
func deliver[T, R any](ctx context.Context, rcv *adapter.Receiver[*dedup.Message[T], R], dec dedup.Decoder, env *dedup.Message[T]) adapter.Delivery[R] {
	if err := adapter.DecodeBody(dec, env); err != nil {
		return rcv.Refused(ctx, env, err)
	}
	return rcv.Deliver(ctx, env)
}

// injector returns what writes the trace context of ctx, a delivery's,
// into a message's headers: the receiver's Observer, when it is a
// delivery.Injector.
func injector[T, R any](ctx context.Context, rcv *adapter.Receiver[*dedup.Message[T], R]) func(set func(key, value string)) {
	return func(set func(key, value string)) { rcv.Inject(ctx, set) }
}

// settleContext is the context of an Ack, Nak, Term, reply or dead letter:
// it outlives a cancelled handler context (the outcome must still be
// reported to the broker) but not SettleTimeout.
func settleContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), timeout)
}

// withDeadline gives ctx a deadline if it has none: nats.go's flushes
// require one.
func withDeadline(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}
