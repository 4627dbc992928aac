package dedupnats

import (
	"context"
	"time"

	"github.com/dedup-go/dedup"
)

// decodeAndHandle decodes env's data into its Body and hands env to the
// receiver. A body that does not decode never reaches the receiver: the
// error matches dedup.ErrUndecodable, which Decide dead-letters.
func decodeAndHandle[T, R any](ctx context.Context, rcv *dedup.Receiver[*dedup.Message[T], R], dec dedup.Decoder, env *dedup.Message[T]) (dedup.Result[R], error) {
	if err := dedup.DecodeBody(dec, env); err != nil {
		return dedup.Result[R]{}, err
	}
	return rcv.Handle(ctx, env)
}

// settled reports what was done with a delivery to the receiver's
// Observer: err is the error that kept the decision from being carried out,
// or else the one it was taken on.
func settled[T, R any](ctx context.Context, rcv *dedup.Receiver[*dedup.Message[T], R], env *dedup.Message[T], res dedup.Result[R], d dedup.Decision, err error) {
	if err == nil {
		err = d.Err
	}
	rcv.Observe(ctx, dedup.Event{
		Kind: dedup.EventSettled, Broker: env.Broker, Source: env.Source,
		MessageID: env.ID, Stream: env.Stream, Partition: env.Partition, Offset: env.Offset, DeliveryCount: env.DeliveryCount,
		Key: res.Key, Status: res.Status, Attempt: res.Attempt, Decision: d, Err: err, Problem: res.Problem,
	})
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
