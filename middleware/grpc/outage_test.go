package dedupgrpc_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/tcpproxy"
	"github.com/dedup-go/dedup/internal/testenv"
	dedupgrpc "github.com/dedup-go/dedup/middleware/grpc"
	"github.com/dedup-go/dedup/store/memstore"
)

// Redis cut off: fail-closed (the default) refuses the call with
// Unavailable and a retry delay, running nothing; fail-open runs the
// handler unprotected, says so in the response metadata and logs it.
// outageTimeout bounds the store calls of the tests that cut a store off:
// a call to a server that stopped answering gives up soon.
const outageTimeout = 500 * time.Millisecond

func TestStoreDownRedis(t *testing.T) {
	t.Parallel()
	proxy := tcpproxy.Start(t, testenv.Redis.Addr(t))
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	st := newRedisStore(t, c, redistest.Prefix(t, redistest.Client(t)), outageTimeout)

	closedSvc, openSvc := &payments{}, &payments{}
	closed := serve(t, closedSvc, newInterceptor(t, st, &dedupgrpc.Options{Config: &dedup.Config{
		Namespace: "payments", StoreRetryDelay: 2 * time.Second,
	}}))
	logs := new(syncBuffer)
	open := serve(t, openSvc, newInterceptor(t, st, &dedupgrpc.Options{Config: &dedup.Config{
		Namespace: "payments", FailOpen: true, Logger: testLogger(t, logs),
	}}))
	req := chargeReq("acct-1", 500, "k-1")
	_, _, err := closed.charge(t, req)
	require.NoError(t, err, "Redis is up")
	proxy.Cut()

	_, _, err = closed.charge(t, chargeReq("acct-1", 500, "k-2"))
	requireStatus(t, err, codes.Unavailable, dedupgrpc.ReasonStoreUnavailable)
	delay, ok := dedupgrpc.RetryDelayOf(err)
	require.True(t, ok)
	require.Equal(t, 2*time.Second, delay)
	require.NotContains(t, err.Error(), proxy.Addr(), "the caller is not told where the store is")
	_, _, err = closed.charge(t, req)
	requireStatus(t, err, codes.Unavailable, dedupgrpc.ReasonStoreUnavailable)
	require.Equal(t, int64(1), closedSvc.runs.Load())

	for i := range 2 {
		resp, header, err := open.charge(t, chargeReq("acct-1", 500, "k-2"))
		require.NoError(t, err)
		require.Equal(t, []string{"true"}, header.Get(dedupgrpc.BypassedMetadata))
		requireReplayed(t, header, false)
		require.Equal(t, int64(i+1), openSvc.runs.Load(), "unprotected: every call runs")
		require.NotNil(t, resp)
	}
	require.Contains(t, logs.String(), "fail-open")
}

// memstore refuses a claim rather than evict one when it holds Capacity
// claims: the same answers as a store that is down.
func TestStoreDownMemstore(t *testing.T) {
	t.Parallel()
	st, err := memstore.New(&memstore.Options{Capacity: 1})
	require.NoError(t, err)
	started, release := make(chan struct{}), make(chan struct{})
	svc := &payments{}
	svc.fn = func(ctx context.Context, run int64, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		if run == 1 {
			close(started)
			<-release
		}
		return reply(run, req), nil
	}
	s := serve(t, svc, newInterceptor(t, st, nil))
	done := make(chan error, 1)
	go func() {
		_, _, err := s.charge(t, chargeReq("acct-1", 500, "k-1"))
		done <- err
	}()
	testenv.Recv(t, started, "the first call's handler")
	_, _, err = s.charge(t, chargeReq("acct-1", 500, "k-2"))
	requireStatus(t, err, codes.Unavailable, dedupgrpc.ReasonStoreUnavailable)
	close(release)
	require.NoError(t, testenv.Recv(t, done, "the first call"))
	require.Equal(t, int64(1), svc.runs.Load())
}

// Replica A reaches Redis through a proxy that A's handler cuts while it
// runs, so that A's completion fails for the whole lease: A's caller gets
// the response with idempotency-not-stored: true in the trailer (and the
// header), and that is true: the retry, which reaches replica B once the
// lease ended, runs the handler again. A recorded outcome carries no such
// metadata.
func TestNotStoredMetadata(t *testing.T) {
	t.Parallel()
	shared := redistest.Client(t)
	prefix := redistest.Prefix(t, shared)
	proxy := tcpproxy.Start(t, testenv.Redis.Addr(t))
	cutOff := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = cutOff.Close() })

	svc := &payments{}
	svc.fn = func(ctx context.Context, run int64, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		if run == 1 {
			proxy.Cut() // A is cut off from Redis from now on
		}
		return reply(run, req), nil
	}
	cfg := &dedup.Config{Namespace: "payments", Lease: time.Second, Logger: slog.New(slog.DiscardHandler)}
	icA := newInterceptor(t, newRedisStore(t, cutOff, prefix, outageTimeout), &dedupgrpc.Options{Config: cfg})
	a := serve(t, svc, icA)
	b := serve(t, svc, newInterceptor(t, newRedisStore(t, shared, prefix, outageTimeout), &dedupgrpc.Options{Config: cfg}))
	req := chargeReq("acct-1", 500, "k-1")

	resp, header, trailer, err := a.chargeTrailer(t, req)
	require.NoError(t, err)
	require.Equal(t, "ch-1", idOf(resp))
	require.Equal(t, []string{"true"}, trailer.Get(dedupgrpc.NotStoredMetadata), "the caller must learn that its retry may run again")
	require.Equal(t, []string{"true"}, header.Get(dedupgrpc.NotStoredMetadata))
	require.Equal(t, uint64(1), icA.Stats().ResultsNotStored)

	deadline := time.Now().Add(testenv.WaitTimeout)
	for {
		resp, header, trailer, err = b.chargeTrailer(t, req)
		if err == nil {
			break
		}
		requireStatus(t, err, codes.Aborted, dedupgrpc.ReasonInFlight) // until A's claim ends in Redis
		require.True(t, time.Now().Before(deadline), "A's lease never ended in Redis")
		time.Sleep(50 * time.Millisecond)
	}
	require.Equal(t, "ch-2", idOf(resp), "the retry ran the handler again, as the trailer said it might")
	requireReplayed(t, header, false)
	require.Empty(t, trailer.Get(dedupgrpc.NotStoredMetadata), "this outcome was recorded")
	require.Empty(t, header.Get(dedupgrpc.NotStoredMetadata))

	resp, header, trailer, err = b.chargeTrailer(t, req)
	require.NoError(t, err)
	requireReplayed(t, header, true)
	require.Equal(t, "ch-2", idOf(resp))
	require.Empty(t, trailer.Get(dedupgrpc.NotStoredMetadata))
	require.Equal(t, int64(2), svc.runs.Load())
}
