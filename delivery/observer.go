package delivery

import "context"

// Observer hears of every delivery once: when an adapter settled it (see
// adapter.Receiver.Deliver and adapter.Delivery.Settled), or, for a caller of Handle
// and HandleBatch, when the receiver answered it. Metrics, tracing and
// logs plug in here (the dedupotel module is one). Observe is called
// synchronously on the delivery's goroutine, with the delivery's context,
// so it must be fast and safe for concurrent use; a panic in it is
// recovered and logged.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// Quiet is an optional ability of an Observer: one that says, when the
// receiver is made, that it records nothing (an OpenTelemetry observer
// over no-op providers) is not called at all, and costs a delivery
// nothing. Its Injector ability, if any, is still used.
type Quiet interface {
	Quiet() bool
}

// DeliveryStarter is an optional ability of an Observer: StartDelivery is
// called before a delivery is handled, and the context it returns is the
// one the key function, the handler and Observe get. A tracing observer
// starts a span in it (so the handler's own spans nest under it) and ends
// it in Observe.
type DeliveryStarter interface {
	StartDelivery(ctx context.Context, o Origin) context.Context
}

// Injector is an optional ability of an Observer: Inject writes the trace
// context of ctx into a message's headers through set. Adapters call it on
// the dead letters and retry copies they publish, so that the trace goes
// on; producer helpers take one in their options.
type Injector interface {
	Inject(ctx context.Context, set func(key, value string))
}
