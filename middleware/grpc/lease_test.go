package dedupgrpc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/tcpproxy"
	"github.com/dedup-go/dedup/internal/testenv"
	dedupgrpc "github.com/dedup-go/dedup/middleware/grpc"
	"github.com/dedup-go/dedup/store/memstore"
)

// A replica whose call is stuck and whose heartbeat stopped (its clock is
// frozen) loses the key when the lease ends in the store: another replica
// takes it over and runs the handler, its response is the one kept, and
// the stuck call's completion is refused.
func TestLeaseExpiryTakeoverMemstore(t *testing.T) {
	t.Parallel()
	epoch := time.Now()
	storeClock := clock.NewFake(epoch)
	st, err := memstore.New(&memstore.Options{Clock: storeClock})
	require.NoError(t, err)
	const lease = 10 * time.Second
	replica := func() *dedupgrpc.Interceptor {
		return newInterceptor(t, st, &dedupgrpc.Options{Config: &dedup.Config{
			Namespace: "payments", Lease: lease, Clock: clock.NewFake(epoch),
		}})
	}
	started, release := make(chan struct{}), make(chan struct{})
	svc := &payments{}
	svc.fn = func(ctx context.Context, run int64, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		if run == 1 {
			close(started)
			<-release // stuck, and deaf to its context
		}
		return reply(run, req), nil
	}
	icA := replica()
	a, b := serve(t, svc, icA), serve(t, svc, replica())
	req := chargeReq("acct-1", 500, "k-1")

	type answer struct {
		resp            *dynamicpb.Message
		header, trailer metadata.MD
		err             error
	}
	first := make(chan answer, 1)
	go func() {
		resp, header, trailer, err := a.chargeTrailer(t, req)
		first <- answer{resp, header, trailer, err}
	}()
	testenv.Recv(t, started, "the stuck call's handler")

	_, _, err = b.charge(t, req)
	requireStatus(t, err, codes.Aborted, dedupgrpc.ReasonInFlight)
	delay, ok := dedupgrpc.RetryDelayOf(err)
	require.True(t, ok)
	require.Positive(t, delay)
	require.LessOrEqual(t, delay, lease, "never more than the remaining lease, on the store's clock")

	storeClock.Advance(lease + time.Second)
	resp, _, err := b.charge(t, req)
	require.NoError(t, err)
	require.Equal(t, "ch-2", idOf(resp), "the second replica took the key over and ran the handler")

	close(release)
	got := testenv.Recv(t, first, "the stuck call")
	require.NoError(t, got.err, "its effect happened: the caller gets its response")
	require.Equal(t, "ch-1", idOf(got.resp))
	require.Equal(t, uint64(1), icA.Stats().LeaseLost)
	require.Equal(t, []string{"true"}, got.trailer.Get(dedupgrpc.NotStoredMetadata), "its retries get the takeover's response, not this one")
	require.Equal(t, []string{"true"}, got.header.Get(dedupgrpc.NotStoredMetadata))

	for _, s := range []*server{a, b} {
		resp, header, err := s.charge(t, req)
		require.NoError(t, err)
		requireReplayed(t, header, true)
		require.Equal(t, "ch-2", idOf(resp), "the kept response is the takeover's")
	}
	require.Equal(t, int64(2), svc.runs.Load())
}

// The same over Redis, with a real partition: the stuck replica is cut off
// from Redis, so its heartbeat fails; its handler is cancelled with
// ErrLeaseLost when its lease ends by its own clock (its caller gets
// Aborted), and the other replica takes the key over once the lease ends
// in Redis.
func TestLeaseExpiryTakeoverRedis(t *testing.T) {
	t.Parallel()
	shared := redistest.Client(t)
	prefix := redistest.Prefix(t, shared)
	proxy := tcpproxy.Start(t, testenv.Redis.Addr(t))
	cutOff := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = cutOff.Close() })

	const lease = 900 * time.Millisecond
	cfg := &dedup.Config{Namespace: "payments", Lease: lease}
	started := make(chan struct{})
	causes := make(chan error, 1)
	svc := &payments{}
	svc.fn = func(ctx context.Context, run int64, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		if run == 1 {
			close(started)
			<-ctx.Done() // stuck until the lease is lost
			causes <- context.Cause(ctx)
			return nil, ctx.Err()
		}
		return reply(run, req), nil
	}
	a := serve(t, svc, newInterceptor(t, newRedisStore(t, cutOff, prefix, outageTimeout), &dedupgrpc.Options{Config: cfg}))
	b := serve(t, svc, newInterceptor(t, newRedisStore(t, shared, prefix, outageTimeout), &dedupgrpc.Options{Config: cfg}))
	req := chargeReq("acct-1", 500, "k-1")

	first := make(chan error, 1)
	go func() {
		_, _, err := a.charge(t, req)
		first <- err
	}()
	testenv.Recv(t, started, "the stuck call's handler")
	proxy.Cut()

	var resp *dynamicpb.Message
	deadline := time.Now().Add(testenv.WaitTimeout)
	for {
		var err error
		resp, _, err = b.charge(t, req)
		if err == nil {
			break
		}
		requireStatus(t, err, codes.Aborted, dedupgrpc.ReasonInFlight)
		require.True(t, time.Now().Before(deadline), "the lease never ended in Redis")
		time.Sleep(50 * time.Millisecond)
	}
	require.Equal(t, "ch-2", idOf(resp))

	cause := testenv.Recv(t, causes, "the stuck handler's cancellation")
	require.True(t, errors.Is(cause, dedup.ErrLeaseLost), "cause: %v", cause)
	err := testenv.Recv(t, first, "the stuck call")
	requireStatus(t, err, codes.Aborted, dedupgrpc.ReasonInFlight)
	require.Contains(t, status.Convert(err).Message(), "took this idempotency key over")

	resp, header, err := b.charge(t, req)
	require.NoError(t, err)
	requireReplayed(t, header, true)
	require.Equal(t, "ch-2", idOf(resp))
	require.Equal(t, int64(2), svc.runs.Load())
}
