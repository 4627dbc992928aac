package dedupnats

import (
	"context"
	"log/slog"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	"github.com/nats-io/nats.go/jetstream"
)

// awaitHolder handles the last delivery of a message whose key another
// delivery holds (in flight elsewhere). JetStream will not deliver it
// again, and dead-lettering it would be wrong while the holder may still
// complete it: so it waits for the holder's outcome, handing the message
// to the receiver again each time the holder's remaining lease (or a third
// of AckWait, sooner) has passed, and calling InProgress meanwhile so that
// JetStream does not let this last delivery time out. Each wait settles
// the try before it as a retry in place (its SettleDuration the wait), and
// each new try is a delivery of its own.
//
// The holder's lease bounds each wait: a holder that completes makes this
// a duplicate (Ack); one that fails, crashes or loses its lease leaves the
// key to this delivery, whose receiver then claims it and runs the handler
// itself (Ack on success; a failure is dead-lettered by the caller, as
// max-deliver). It returns the last try, unsettled; a decision still in
// flight means ctx ended (a hard stop) first.
func (c *Consumer[T, R]) awaitHolder(ctx context.Context, m jetstream.Msg, env *dedup.Message[T], dlv adapter.Delivery[R]) adapter.Delivery[R] {
	poll := max(c.ackWait/3, c.opts.MinRetryDelay)
	for dlv.Decision.Action == delivery.Retry && dlv.Decision.Reason == delivery.ReasonInFlight {
		begin := time.Now()
		if err := m.InProgress(); err != nil {
			c.opts.Logger.WarnContext(dlv.Context(), "dedupnats: InProgress failed while waiting for the key's holder", slog.String("key", dlv.Result.Key), slog.Any("error", err))
		}
		t := time.NewTimer(min(max(dlv.Decision.Delay, c.opts.MinRetryDelay), poll))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return dlv
		}
		c.stats.retriedInPlace.Add(1)
		dlv.Settled(adapter.Settlement{Duration: time.Since(begin)})
		dlv = c.rcv.Deliver(ctx, env)
	}
	return dlv
}
