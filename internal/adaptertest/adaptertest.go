// Package adaptertest holds what the adapters' tests share: watching the
// events an adapter reports, and stopping a consumer when a test ends.
package adaptertest

import (
	"context"
	"testing"

	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
)

// OnSettled is an Observer that calls fn with every delivery an adapter
// settled (Event.Settled), and ignores any other.
func OnSettled(fn func(e delivery.Event)) delivery.Observer {
	return delivery.ObserverFunc(func(_ context.Context, e delivery.Event) {
		if e.Settled {
			fn(e)
		}
	})
}

// Stopper is a consumer or subscriber of an adapter.
type Stopper interface {
	Stop(context.Context) error
	Stopped() <-chan struct{}
}

// StopAtCleanup stops s when t ends, and waits (bounded) until it stopped.
func StopAtCleanup(t testing.TB, s Stopper) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
		defer cancel()
		_ = s.Stop(ctx) // a test may have stopped it, or checks Stop's error itself
		testenv.Recv(t, s.Stopped(), "the consumer to stop")
	})
}
