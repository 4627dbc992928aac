package adapter

import (
	"context"

	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/ctxkey"
)

// WithOrigin returns a copy of ctx under which the receiver completes the
// Origin of each delivery with fill, which gets the message's own (see
// delivery.Originer) and returns it completed: an adapter sets it once on the
// context its deliveries are handed over with, for what it knows of its
// consumer and no message carries (the server it is connected to, its
// consumer group, the destination's template). fill runs for every
// delivery of a receiver with an Observer, and for the events given to
// [Receiver.Observe], on the delivery's goroutine: keep it fast, and safe
// for concurrent use. (An Origin goes by value, which a pointer handed to
// a function unknown to the compiler would move to the heap on every
// delivery.) Under a context that already has one, both run, the outer
// first.
func WithOrigin(ctx context.Context, fill func(delivery.Origin) delivery.Origin) context.Context {
	if fill == nil {
		return ctx
	}
	if outer, ok := ctx.Value(ctxkey.OriginFill{}).(func(delivery.Origin) delivery.Origin); ok {
		inner := fill
		fill = func(o delivery.Origin) delivery.Origin { return inner(outer(o)) }
	}
	return context.WithValue(ctx, ctxkey.OriginFill{}, fill)
}
