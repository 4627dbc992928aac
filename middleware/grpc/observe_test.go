package dedupgrpc_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
	dedupgrpc "github.com/dedup-go/dedup/middleware/grpc"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
)

// traceparent is the W3C trace context the test's clients send.
const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// outerKey is the context key of the value an outer interceptor sets.
type outerKey struct{}

// outer stands for otelgrpc or any interceptor before dedupgrpc: it puts
// the call's x-req metadata in the context.
func outer(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	tag := ""
	if v := metadata.ValueFromIncomingContext(ctx, "x-req"); len(v) == 1 {
		tag = v[0]
	}
	return handler(context.WithValue(ctx, outerKey{}, tag), req)
}

// seen is an event with what the Observer read while it had it.
type seen struct {
	delivery.Event
	outer       any
	traceparent string
	keyVisible  bool // Origin.Header gave the idempotency key
}

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []seen
}

func (r *recorder) Observe(ctx context.Context, e delivery.Event) {
	s := seen{Event: e, outer: ctx.Value(outerKey{})}
	if e.Header != nil {
		s.traceparent, _ = e.Header.Get("Traceparent") // metadata names are lower case: the lookup is not
		_, s.keyVisible = e.Header.Get("Idempotency-Key")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, s)
}

// one requires that exactly one event came since the last call, and
// returns it. A call's event is reported before its answer is sent.
func (r *recorder) one(t testing.TB, what string) seen {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Len(t, r.events, 1, "%s: one event per call", what)
	e := r.events[0]
	r.events = nil
	return e
}

// serveChained starts svc behind outer and ic, and connects a client.
func serveChained(t testing.TB, svc *payments, ic *dedupgrpc.Interceptor) *server {
	t.Helper()
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(outer, ic.Unary))
	gs.RegisterService(&paymentsDesc, svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(ln) })
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		gs.Stop()
		wg.Wait()
	})
	return &server{ic: ic, conn: conn, addr: ln.Addr().String()}
}

// requireOrigin checks what every event of a call sent with x-req tag
// carries.
func requireOrigin(t testing.TB, e seen, tag string) {
	t.Helper()
	require.Equal(t, "grpc", e.Broker, tag)
	require.Equal(t, chargeMethod, e.Source, tag)
	require.Empty(t, e.MessageID, tag)
	require.Equal(t, "payments", e.Namespace, tag)
	require.Equal(t, tag, e.outer, "%s: Observe gets the call's context, as outer interceptors made it", tag)
	require.Equal(t, traceparent, e.traceparent, "%s: the metadata is readable through Origin.Header", tag)
	require.False(t, e.keyVisible, "%s: the idempotency key is never in the Origin", tag)
	require.False(t, e.Settled, tag)
}

// requireRefused checks the event of a call the interceptor refused
// itself.
func requireRefused(t testing.TB, e seen, code codes.Code, reason string, is error, why delivery.Reason) {
	t.Helper()
	var re *dedupgrpc.RefusedError
	require.ErrorAs(t, e.Err, &re)
	require.Equal(t, code, re.Code)
	require.Equal(t, reason, re.Reason)
	require.ErrorIs(t, e.Err, is)
	require.Equal(t, why, e.Decision.Reason)
	require.Equal(t, delivery.StatusNone, e.Status)
	require.Empty(t, e.Key)
	require.False(t, e.Stored)
}

// TestObserverEvents: an Observer hears one event per protected call that
// carries a key, or that RequireKey refuses, none for a method Options
// leaves alone; each says what happened (processed, replayed, in flight,
// reused, refused), with Broker "grpc", the full method as Source, the
// incoming metadata readable and the call's context.
func TestObserverEvents(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(testing.TB) store.Store) {
		var rec recorder
		entered, release := make(chan struct{}, 1), make(chan struct{})
		svc := &payments{}
		svc.fn = func(ctx context.Context, run int64, req *dynamicpb.Message) (*dynamicpb.Message, error) {
			if req.Get(chargeRequest.Fields().ByName("account")).String() == "hold" {
				entered <- struct{}{}
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return reply(run, req), nil
		}
		principal := func(ctx context.Context) (string, error) {
			if v := metadata.ValueFromIncomingContext(ctx, "x-tenant"); len(v) == 1 {
				return v[0], nil
			}
			return "", errors.New("who are you")
		}
		check := func(_ context.Context, key, _, _ string) error {
			if key == "stolen" {
				return dedupgrpc.ErrKeyForbidden
			}
			return nil
		}
		ic := newInterceptor(t, newStore(t), &dedupgrpc.Options{
			Principal: principal, KeyCheck: check, RequireKey: true,
			Methods: func(m string) bool { return m == chargeMethod },
			Config:  &dedup.Config{Namespace: "payments", Observer: &rec},
		})
		s := serveChained(t, svc, ic)
		var once sync.Once
		unblock := func() { once.Do(func() { close(release) }) }
		t.Cleanup(unblock) // before the server stops
		call := func(tag string, req *dynamicpb.Message, key string, more ...string) error {
			md := append([]string{"x-req", tag, "traceparent", traceparent}, more...)
			if key != "" {
				md = append(md, dedupgrpc.MetadataKey, key)
			}
			_, _, err := s.charge(t, req, md...)
			return err
		}
		alice := []string{"x-tenant", "alice"}

		require.NoError(t, call("processed", chargeReq("acct-1", 500, ""), "k1", alice...))
		e := rec.one(t, "processed")
		requireOrigin(t, e, "processed")
		require.Equal(t, delivery.StatusProcessed, e.Status)
		require.NoError(t, e.Err)
		require.True(t, e.Stored)
		require.Equal(t, "payments:5:alice:k1", e.Key)

		require.NoError(t, call("replayed", chargeReq("acct-1", 500, ""), "k1", alice...))
		e = rec.one(t, "replayed")
		requireOrigin(t, e, "replayed")
		require.Equal(t, delivery.StatusDuplicate, e.Status)
		require.True(t, e.Stored)

		err := call("reused", chargeReq("acct-1", 999, ""), "k1", alice...)
		requireStatus(t, err, codes.FailedPrecondition, dedupgrpc.ReasonKeyReused)
		e = rec.one(t, "reused")
		requireOrigin(t, e, "reused")
		require.ErrorIs(t, e.Err, dedup.ErrKeyReused)
		require.False(t, e.Stored)

		held := make(chan error, 1)
		go func() { held <- call("held", chargeReq("hold", 1, ""), "k2", alice...) }()
		testenv.Recv(t, entered, "the held call's handler")
		err = call("in flight", chargeReq("hold", 1, ""), "k2", alice...)
		requireStatus(t, err, codes.Aborted, dedupgrpc.ReasonInFlight)
		e = rec.one(t, "in flight")
		requireOrigin(t, e, "in flight")
		require.Equal(t, delivery.StatusInFlight, e.Status)
		require.False(t, e.Stored)
		unblock()
		require.NoError(t, testenv.Recv(t, held, "the held call"))
		e = rec.one(t, "held")
		requireOrigin(t, e, "held")
		require.Equal(t, delivery.StatusProcessed, e.Status)

		err = call("missing", chargeReq("acct-1", 500, ""), "", alice...)
		requireStatus(t, err, codes.InvalidArgument, dedupgrpc.ReasonKeyMissing)
		e = rec.one(t, "missing")
		requireOrigin(t, e, "missing")
		requireRefused(t, e, codes.InvalidArgument, dedupgrpc.ReasonKeyMissing, dedup.ErrNoKey, delivery.ReasonNoKey)

		err = call("bad key", chargeReq("acct-1", 500, ""), strings.Repeat("k", dedupgrpc.MaxKeyLength+1), alice...)
		requireStatus(t, err, codes.InvalidArgument, dedupgrpc.ReasonKeyInvalid)
		e = rec.one(t, "bad key")
		requireOrigin(t, e, "bad key")
		requireRefused(t, e, codes.InvalidArgument, dedupgrpc.ReasonKeyInvalid, dedup.ErrInvalidKey, delivery.ReasonInvalidKey)
		require.ErrorIs(t, e.Err, dedup.ErrInvalidKey)

		err = call("forbidden", chargeReq("acct-1", 500, ""), "stolen", alice...)
		requireStatus(t, err, codes.PermissionDenied, dedupgrpc.ReasonKeyForbidden)
		e = rec.one(t, "forbidden")
		requireOrigin(t, e, "forbidden")
		requireRefused(t, e, codes.PermissionDenied, dedupgrpc.ReasonKeyForbidden, dedup.ErrInvalidKey, delivery.ReasonInvalidKey)
		require.ErrorIs(t, e.Err, dedupgrpc.ErrKeyForbidden)

		err = call("no principal", chargeReq("acct-1", 500, ""), "k3")
		requireStatus(t, err, codes.Unauthenticated, "")
		e = rec.one(t, "no principal")
		requireOrigin(t, e, "no principal")
		requireRefused(t, e, codes.Unauthenticated, "", dedup.ErrNoKey, delivery.ReasonNoKey)

		_, _, err = s.echo(t, "hi", "x-req", "echo", dedupgrpc.MetadataKey, "k4")
		require.NoError(t, err)
		rec.mu.Lock()
		require.Empty(t, rec.events, "a method Options.Methods leaves alone is not the interceptor's event")
		rec.mu.Unlock()
	})
}

// TestObserverNotStored: a call whose key another call took over (its
// lease ended in the store while its handler was stuck) is answered with
// idempotency-not-stored, and its event says so: processed, Problem
// ErrLeaseLost, not Stored.
func TestObserverNotStored(t *testing.T) {
	t.Parallel()
	epoch := time.Now()
	storeClock := clock.NewFake(epoch)
	st, err := memstore.New(&memstore.Options{Clock: storeClock})
	require.NoError(t, err)
	const lease = 10 * time.Second
	var rec recorder
	// The interceptor's clock stands still: its heartbeat never extends the
	// lease, which ends on the store's clock.
	ic := newInterceptor(t, st, &dedupgrpc.Options{Config: &dedup.Config{
		Namespace: "payments", Lease: lease, Clock: clock.NewFake(epoch), Observer: &rec,
	}})
	started, release := make(chan struct{}), make(chan struct{})
	svc := &payments{}
	svc.fn = func(ctx context.Context, run int64, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		if run == 1 {
			close(started)
			<-release // stuck, deaf to its context
		}
		return reply(run, req), nil
	}
	s := serveChained(t, svc, ic)
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the server stops
	req := chargeReq("acct-1", 500, "k-1")
	md := func(tag string) []string { return []string{"x-req", tag, "traceparent", traceparent} }

	first := make(chan error, 1)
	var trailer metadata.MD
	go func() {
		_, _, tr, err := s.chargeTrailer(t, req, md("stuck")...)
		trailer = tr
		first <- err
	}()
	testenv.Recv(t, started, "the stuck call's handler")
	storeClock.Advance(lease + time.Second)
	_, _, err = s.charge(t, req, md("takeover")...)
	require.NoError(t, err)
	e := rec.one(t, "takeover")
	requireOrigin(t, e, "takeover")
	require.True(t, e.Stored)

	unblock()
	require.NoError(t, testenv.Recv(t, first, "the stuck call"))
	require.Equal(t, []string{"true"}, trailer.Get(dedupgrpc.NotStoredMetadata))
	e = rec.one(t, "stuck")
	requireOrigin(t, e, "stuck")
	require.Equal(t, delivery.StatusProcessed, e.Status)
	require.ErrorIs(t, e.Problem, dedup.ErrLeaseLost)
	require.False(t, e.Stored)
	require.Equal(t, delivery.ReasonNotStored, e.Decision.Reason)
}
