package adapter

import (
	"context"
	"sync"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/bridge"
)

// Delivery is one message handled for an adapter, until the adapter
// settled it: [Receiver.Deliver] runs Handle and Decide, the adapter
// carries out the Decision (ack, retry, dead letter) and reports it with
// Settled, which hands the Observer one Event for the whole delivery.
type Delivery[R any] struct {
	// Result and Err are what Handle returned.
	Result dedup.Result[R]
	Err    error
	// Decision is what the adapter is to do with the delivery.
	Decision delivery.Decision

	ctx      context.Context
	settler  settler
	ev       delivery.Event
	observed bool // ev is to be reported
	settled  bool
}

// settler is the part of a Receiver a Delivery reports to.
type settler interface {
	Settle(ctx context.Context, e *delivery.Event, observed bool)
}

func handed[R any](s settler, b bridge.Delivery[dedup.Result[R]]) Delivery[R] {
	return Delivery[R]{Result: b.Result, Err: b.Err, Decision: b.Decision, ctx: b.Ctx, settler: s, ev: b.Event, observed: b.Observed}
}

// Context is the delivery's context: the caller's, with what the
// Observer's StartDelivery added (a span). Use it for what the adapter
// does next (a dead letter carries its trace context).
func (d *Delivery[R]) Context() context.Context { return d.ctx }

// Settlement is what an adapter did with a delivery.
type Settlement struct {
	// Decision is what was carried out; the zero value means the
	// Delivery's own Decision.
	Decision delivery.Decision
	// Duration is how long carrying it out took.
	Duration time.Duration
	// Err is what kept the adapter from carrying it out, nil when it did.
	Err error
}

// Settled reports what the adapter did with the delivery: the Observer
// gets one Event, and a dead letter the broker took is counted in the
// receiver's Stats. Later calls do nothing.
func (d *Delivery[R]) Settled(s Settlement) {
	if d.settled || d.settler == nil {
		return
	}
	d.settled = true
	if s.Decision.Action == 0 {
		s.Decision = d.Decision
	}
	d.ev.Decision = s.Decision
	d.ev.Settled, d.ev.SettleDuration, d.ev.SettleErr = true, s.Duration, s.Err
	// The receiver is handed a pooled copy, not &d.ev: a pointer into d
	// passed through the settler interface would move every Delivery (544
	// bytes) an adapter holds to the heap, one allocation per message. The
	// receiver reads e while Settle runs and keeps nothing of it (the
	// Observer gets a copy).
	e := eventPool.Get().(*delivery.Event)
	*e = d.ev
	d.settler.Settle(d.ctx, e, d.observed)
	*e = delivery.Event{}
	eventPool.Put(e)
}

// eventPool holds the Events Settled hands the receiver.
var eventPool = sync.Pool{New: func() any { return new(delivery.Event) }}
