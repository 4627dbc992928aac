package nats

import (
	"context"
	"fmt"
	"time"

	"github.com/dedup-go/dedup"
)

// decodeAndHandle decodes env's data into its Body and hands env to the
// receiver. A body that does not decode never reaches the receiver: the
// error matches dedup.ErrUndecodable, which Decide dead-letters.
func decodeAndHandle[T, R any](ctx context.Context, rcv *dedup.Receiver[*Msg[T], R], dec Decoder, env *Msg[T]) (dedup.Result[R], error) {
	if err := decodeBody(dec, env); err != nil {
		return dedup.Result[R]{}, err
	}
	return rcv.Handle(ctx, env)
}

// decodeBody decodes env.Data into env.Body; a panicking decoder is an
// undecodable body too, not a crashed consumer.
func decodeBody[T any](dec Decoder, env *Msg[T]) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("dedupnats: decode %q: %w: the decoder panicked: %v", env.Subject, dedup.ErrUndecodable, p)
		}
	}()
	if err := dec.Unmarshal(env.Data, &env.Body); err != nil {
		return fmt.Errorf("dedupnats: decode %q: %w: %w", env.Subject, dedup.ErrUndecodable, err)
	}
	return nil
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
