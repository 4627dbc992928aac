package gateway_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/tcpproxy"
	"github.com/dedup-go/dedup/internal/testenv"
	dedupgrpc "github.com/dedup-go/dedup/middleware/grpc"
	dedupgateway "github.com/dedup-go/dedup/middleware/grpc/gateway"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
	"github.com/dedup-go/dedup/store/redisstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const echoMethod = "/dedup.test.Echo/Echo"

// echo answers "<value> #<run>"; a value of "block" waits for release,
// "missing" is NotFound, "cut" calls cut.
type echo struct {
	runs    atomic.Int64
	started chan struct{}
	release chan struct{}
	cut     func()
}

type echoServer interface {
	echo(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
}

func (e *echo) echo(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	n := e.runs.Add(1)
	switch in.GetValue() {
	case "block":
		close(e.started)
		<-e.release
	case "missing":
		return nil, status.Error(codes.NotFound, "no such thing")
	case "cut":
		e.cut()
	}
	return wrapperspb.String(fmt.Sprintf("%s #%d", in.GetValue(), n)), nil
}

var echoDesc = grpc.ServiceDesc{
	ServiceName: "dedup.test.Echo",
	HandlerType: (*echoServer)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Echo", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			return srv.(echoServer).echo(ctx, req.(*wrapperspb.StringValue))
		}
		if ic == nil {
			return h(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: echoMethod}, h)
	}}},
}

// startGateway serves svc over gRPC behind an interceptor over st, with a
// grpc-gateway ServeMux in front of it (POST /v1/echo), and returns the
// gateway's URL.
func startGateway(t testing.TB, st store.Store, svc *echo) string {
	t.Helper()
	return startGatewayWith(t, st, svc, &dedup.Config{Namespace: "echo"})
}

// startGatewayWith is startGateway with the receiver's Config.
func startGatewayWith(t testing.TB, st store.Store, svc *echo, cfg *dedup.Config) string {
	t.Helper()
	ic, err := dedupgrpc.New(st, &dedupgrpc.Options{Config: cfg, SharedScope: true})
	require.NoError(t, err)
	gs := grpc.NewServer(grpc.UnaryInterceptor(ic.Unary))
	gs.RegisterService(&echoDesc, svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(ln) })
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)

	mux := runtime.NewServeMux(dedupgateway.ServeMuxOptions()...)
	require.NoError(t, mux.HandlePath(http.MethodPost, "/v1/echo", echoRoute(mux, conn)))
	hs := httptest.NewServer(mux)
	t.Cleanup(func() {
		hs.Close()
		_ = conn.Close()
		gs.Stop()
		wg.Wait()
	})
	return hs.URL + "/v1/echo"
}

// echoRoute is what protoc-gen-grpc-gateway would generate for
// rpc Echo(StringValue) returns (StringValue) { option (google.api.http) = { post: "/v1/echo" body: "*" }; }
func echoRoute(mux *runtime.ServeMux, conn *grpc.ClientConn) runtime.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, _ map[string]string) {
		inbound, outbound := runtime.MarshalerForRequest(mux, r)
		ctx, err := runtime.AnnotateContext(r.Context(), mux, r, echoMethod, runtime.WithHTTPPathPattern("/v1/echo"))
		if err != nil {
			runtime.HTTPError(ctx, mux, outbound, w, r, err)
			return
		}
		in := new(wrapperspb.StringValue)
		if err := inbound.NewDecoder(r.Body).Decode(in); err != nil {
			runtime.HTTPError(ctx, mux, outbound, w, r, status.Error(codes.InvalidArgument, err.Error()))
			return
		}
		var md runtime.ServerMetadata
		out := new(wrapperspb.StringValue)
		err = conn.Invoke(ctx, echoMethod, in, out, grpc.Header(&md.HeaderMD), grpc.Trailer(&md.TrailerMD))
		ctx = runtime.NewServerMetadataContext(ctx, md)
		if err != nil {
			runtime.HTTPError(ctx, mux, outbound, w, r, err)
			return
		}
		runtime.ForwardResponseMessage(ctx, mux, outbound, w, r, out)
	}
}

type response struct {
	code   int
	header http.Header
	body   string
}

// post sends body (JSON) to url with the Idempotency-Key key, none when "".
func post(t testing.TB, url, key, body string) response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{resp.StatusCode, resp.Header, string(b)}
}

func newMemstore(t testing.TB) store.Store {
	st, err := memstore.New(nil)
	require.NoError(t, err)
	return st
}

// An HTTP caller's Idempotency-Key reaches the interceptor: the second
// POST is replayed (Idempotency-Replayed: true, the same body), also with
// the key as a quoted string; another body with the key is 422; a key in
// flight is 409 with Retry-After; a bad key is 400; no key runs each time;
// other statuses map as the gateway maps them.
func TestGateway(t *testing.T) {
	t.Parallel()
	svc := &echo{started: make(chan struct{}), release: make(chan struct{})}
	url := startGateway(t, newMemstore(t), svc)

	first := post(t, url, "k-1", `"hello"`)
	require.Equal(t, http.StatusOK, first.code, first.body)
	require.Equal(t, `"hello #1"`, first.body)
	require.Empty(t, first.header.Get("Idempotency-Replayed"))
	for _, key := range []string{"k-1", `"k-1"`} {
		again := post(t, url, key, `"hello"`)
		require.Equal(t, http.StatusOK, again.code, again.body)
		require.Equal(t, first.body, again.body)
		require.Equal(t, "true", again.header.Get("Idempotency-Replayed"))
	}
	require.Equal(t, int64(1), svc.runs.Load())

	other := post(t, url, "k-1", `"bye"`)
	require.Equal(t, http.StatusUnprocessableEntity, other.code, other.body)
	require.Contains(t, other.body, dedupgrpc.ReasonKeyReused)

	bad := post(t, url, strings.Repeat("k", 256), `"hello"`)
	require.Equal(t, http.StatusBadRequest, bad.code, bad.body)
	require.Contains(t, bad.body, dedupgrpc.ReasonKeyInvalid)

	for range 2 {
		require.Equal(t, http.StatusOK, post(t, url, "", `"plain"`).code)
	}
	require.Equal(t, http.StatusNotFound, post(t, url, "k-404", `"missing"`).code)
	require.Equal(t, int64(4), svc.runs.Load())

	release := sync.OnceFunc(func() { close(svc.release) })
	t.Cleanup(release) // a failure below must not leave the call blocked
	done := make(chan response, 1)
	go func() { done <- post(t, url, "k-2", `"block"`) }()
	testenv.Recv(t, svc.started, "the blocked call")
	busy := post(t, url, "k-2", `"block"`)
	require.Equal(t, http.StatusConflict, busy.code, busy.body)
	// The receiver's first look again comes after about 200 ms, which
	// Retry-After rounds up to a whole second.
	require.Equal(t, "1", busy.header.Get("Retry-After"))
	release()
	require.Equal(t, http.StatusOK, testenv.Recv(t, done, "the blocked call").code)
	require.Equal(t, int64(5), svc.runs.Load())
}

// Redis cut off under fail-closed: 503 with Retry-After.
func TestGatewayStoreDown(t *testing.T) {
	t.Parallel()
	proxy := tcpproxy.Start(t, testenv.Redis.Addr(t))
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := redisstore.New(ctx, c, &redisstore.Options{Prefix: redistest.Prefix(t, redistest.Client(t)), Timeout: 500 * time.Millisecond})
	require.NoError(t, err)
	svc := &echo{}
	url := startGateway(t, st, svc)
	require.Equal(t, http.StatusOK, post(t, url, "k-1", `"hello"`).code)
	proxy.Cut()
	down := post(t, url, "k-2", `"hello"`)
	require.Equal(t, http.StatusServiceUnavailable, down.code, down.body)
	require.Equal(t, "5", down.header.Get("Retry-After"))
	require.Equal(t, int64(1), svc.runs.Load())
}

// Redis cut off while the handler runs, for the whole lease: the HTTP
// caller gets the response with Idempotency-Not-Stored: true.
func TestGatewayNotStored(t *testing.T) {
	t.Parallel()
	proxy := tcpproxy.Start(t, testenv.Redis.Addr(t))
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := redisstore.New(ctx, c, &redisstore.Options{Prefix: redistest.Prefix(t, redistest.Client(t)), Timeout: 5 * time.Second}) // the cut fails calls at once; a busy machine may take long to answer the first ones
	require.NoError(t, err)
	svc := &echo{cut: proxy.Cut}
	url := startGatewayWith(t, st, svc, &dedup.Config{Namespace: "echo", Lease: time.Second, Logger: slog.New(slog.DiscardHandler)})
	ok := post(t, url, "k-1", `"hello"`)
	require.Equal(t, http.StatusOK, ok.code, ok.body)
	require.Empty(t, ok.header.Get("Idempotency-Not-Stored"))
	cut := post(t, url, "k-2", `"cut"`)
	require.Equal(t, http.StatusOK, cut.code, cut.body)
	require.Equal(t, `"cut #2"`, cut.body)
	require.Equal(t, "true", cut.header.Get("Idempotency-Not-Stored"))
}
