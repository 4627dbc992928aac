package dedup

import (
	"context"
	"log/slog"
	"time"

	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/bridge"
)

// What only adapters use of a Receiver is reached through package
// adapter, not through the Receiver's own methods: bridge.Port hands
// adapter.Bind a port, whose methods adapter.Receiver calls.
func init() {
	bridge.Port = func(r any) any {
		if p, ok := r.(porter); ok {
			return p.port()
		}
		return nil
	}
	bridge.ValidateID = validateID
}

type porter interface{ port() any }

func (r *Receiver[M, R]) port() any { return port[M, R]{r} }

// port is the adapter-facing view of a Receiver. Its methods are
// exported so that package adapter can name them in an interface; the
// type itself is not, so they are no part of this package's API.
type port[M, R any] struct{ r *Receiver[M, R] }

func (p port[M, R]) Deliver(ctx context.Context, msg M) bridge.Delivery[Result[R]] {
	return p.r.deliver(ctx, msg)
}

func (p port[M, R]) DeliverBatch(ctx context.Context, msgs []M) []bridge.Delivery[Result[R]] {
	return p.r.deliverBatch(ctx, msgs)
}

func (p port[M, R]) Refused(ctx context.Context, msg M, err error) bridge.Delivery[Result[R]] {
	return p.r.refused(ctx, msg, err)
}

func (p port[M, R]) Settle(ctx context.Context, e *delivery.Event, observed bool) {
	p.r.settle(ctx, e, observed)
}

func (p port[M, R]) Observe(ctx context.Context, e delivery.Event) { p.r.observe(ctx, e) }

func (p port[M, R]) Inject(ctx context.Context, set func(key, value string)) { p.r.inject(ctx, set) }

func (p port[M, R]) Decide(res Result[R], err error) delivery.Decision { return p.r.decide(res, err) }

func (p port[M, R]) Logger() *slog.Logger { return p.r.cfg.Logger }

func (p port[M, R]) StoreRetryDelay() time.Duration { return p.r.cfg.StoreRetryDelay }
