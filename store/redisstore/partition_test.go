package redisstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/tcpproxy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/redisstore"
)

// TestPartitionedWorkerStopsAtLeaseEnd: worker A is cut off from Redis
// (a partition: Redis itself is up) while its handler works. It cannot
// extend its lease, so when the lease ends by A's own clock its handler is
// cancelled with ErrLeaseLost, before worker B, which still reaches Redis,
// takes the key over. A handler that honours its context then has its
// effect once, in B.
func TestPartitionedWorkerStopsAtLeaseEnd(t *testing.T) {
	t.Parallel()
	shared := redistest.Client(t)
	proxy := tcpproxy.Start(t, shared.Options().Addr)
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = viaProxy.Close() })
	prefix := redistest.Prefix(t, shared)
	const lease = 1500 * time.Millisecond
	const work = 4 * lease // A's handler: longer than its lease
	cfg := &dedup.Config{Namespace: "pay", Lease: lease, Retention: time.Minute}

	var effects atomic.Int64
	var cause atomic.Value
	entered := make(chan struct{})
	a, err := dedup.NewReceiver(newStore(t, viaProxy, &redisstore.Options{Prefix: prefix, Timeout: 200 * time.Millisecond}), paymentID,
		func(ctx context.Context, p payment) (string, error) {
			close(entered)
			select {
			case <-time.After(work):
				effects.Add(1)
				return "a", nil
			case <-ctx.Done():
				cause.Store(context.Cause(ctx))
				return "", ctx.Err()
			}
		}, cfg)
	require.NoError(t, err)
	b, err := dedup.NewReceiver(newStore(t, shared, &redisstore.Options{Prefix: prefix}), paymentID,
		func(ctx context.Context, p payment) (string, error) {
			effects.Add(1)
			return "b", nil
		}, cfg)
	require.NoError(t, err)

	aDone := make(chan error, 1)
	go func() {
		_, err := a.Handle(context.Background(), payment{"p1"})
		aDone <- err
	}()
	testenv.Recv(t, entered, "the handler to start")
	proxy.Cut()

	// B retries as a broker would until the key is free.
	deadline := time.Now().Add(10 * time.Second)
	var res dedup.Result[string]
	for {
		res, err = b.Handle(t.Context(), payment{"p1"})
		require.NoError(t, err)
		if res.Status != delivery.StatusInFlight {
			break
		}
		require.True(t, time.Now().Before(deadline), "B never got the key")
		time.Sleep(50 * time.Millisecond)
	}
	require.Equal(t, delivery.StatusProcessed, res.Status)
	require.Equal(t, 2, res.Attempt, "B took A's claim over")

	select {
	case err := <-aDone:
		require.ErrorIs(t, err, dedup.ErrLeaseLost)
	case <-time.After(10 * time.Second):
		t.Fatalf("A's handler was never cancelled (effects so far: %d)", effects.Load())
	}
	require.ErrorIs(t, cause.Load().(error), dedup.ErrLeaseLost)
	require.Equal(t, int64(1), effects.Load(), "the effect happened once, in B")
}
