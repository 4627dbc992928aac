package dedupgrpc_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/internal/redistest"
	dedupgrpc "github.com/dedup-go/dedup/middleware/grpc"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
	"github.com/dedup-go/dedup/store/redisstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The test service is defined in Go, without protoc: a file descriptor
// built by hand, dynamicpb messages, and a grpc.ServiceDesc written out.
//
//	package dedup.test;
//	message ChargeRequest { string idempotency_key = 1; string account = 2; int64 amount = 3; }
//	message ChargeReply { string id = 1; string account = 2; int64 amount = 3; bytes blob = 4; }
//	service Payments {
//	  rpc Charge(ChargeRequest) returns (ChargeReply);
//	  rpc Echo(google.protobuf.StringValue) returns (google.protobuf.StringValue);
//	}
const (
	chargeMethod = "/dedup.test.Payments/Charge"
	echoMethod   = "/dedup.test.Payments/Echo"
)

var (
	chargeRequest, chargeReply protoreflect.MessageDescriptor
	numberKeyRequest           protoreflect.MessageDescriptor // int64 idempotency_key = 1
	// testTypes resolves the dynamic types for replays (Options.Types).
	testTypes = new(protoregistry.Types)
)

func init() {
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	i64 := descriptorpb.FieldDescriptorProto_TYPE_INT64.Enum()
	byt := descriptorpb.FieldDescriptorProto_TYPE_BYTES.Enum()
	field := func(name string, n int32, typ *descriptorpb.FieldDescriptorProto_Type) *descriptorpb.FieldDescriptorProto {
		return &descriptorpb.FieldDescriptorProto{
			Name: proto.String(name), JsonName: proto.String(name), Number: proto.Int32(n), Type: typ,
			Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
		}
	}
	fdp := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("dedup/test/payments.proto"),
		Package: proto.String("dedup.test"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("ChargeRequest"), Field: []*descriptorpb.FieldDescriptorProto{
				field("idempotency_key", 1, str), field("account", 2, str), field("amount", 3, i64),
			}},
			{Name: proto.String("ChargeReply"), Field: []*descriptorpb.FieldDescriptorProto{
				field("id", 1, str), field("account", 2, str), field("amount", 3, i64), field("blob", 4, byt),
			}},
			{Name: proto.String("NumberKeyRequest"), Field: []*descriptorpb.FieldDescriptorProto{
				field("idempotency_key", 1, i64),
			}},
		},
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		panic(err)
	}
	chargeRequest = fd.Messages().ByName("ChargeRequest")
	chargeReply = fd.Messages().ByName("ChargeReply")
	numberKeyRequest = fd.Messages().ByName("NumberKeyRequest")
	for _, md := range []protoreflect.MessageDescriptor{chargeRequest, chargeReply} {
		if err := testTypes.RegisterMessage(dynamicpb.NewMessageType(md)); err != nil {
			panic(err)
		}
	}
}

// payments is the test service. fn, when set (before any call), replaces
// the default Charge, which answers with the next charge id.
type payments struct {
	runs atomic.Int64
	echo atomic.Int64
	fn   func(ctx context.Context, run int64, req *dynamicpb.Message) (*dynamicpb.Message, error)
}

type paymentsServer interface {
	charge(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error)
}

func (p *payments) charge(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
	run := p.runs.Add(1)
	if p.fn != nil {
		return p.fn(ctx, run, req)
	}
	return reply(run, req), nil
}

// reply is the default answer of run for req.
func reply(run int64, req *dynamicpb.Message) *dynamicpb.Message {
	out := dynamicpb.NewMessage(chargeReply)
	out.Set(chargeReply.Fields().ByName("id"), protoreflect.ValueOfString(fmt.Sprintf("ch-%d", run)))
	out.Set(chargeReply.Fields().ByName("account"), req.Get(chargeRequest.Fields().ByName("account")))
	out.Set(chargeReply.Fields().ByName("amount"), req.Get(chargeRequest.Fields().ByName("amount")))
	return out
}

var paymentsDesc = grpc.ServiceDesc{
	ServiceName: "dedup.test.Payments",
	HandlerType: (*paymentsServer)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Charge", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := dynamicpb.NewMessage(chargeRequest)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return srv.(paymentsServer).charge(ctx, req.(*dynamicpb.Message))
			}
			if ic == nil {
				return h(ctx, in)
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: chargeMethod}, h)
		}},
		{MethodName: "Echo", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				n := srv.(*payments).echo.Add(1)
				return wrapperspb.String(fmt.Sprintf("%s #%d", req.(*wrapperspb.StringValue).GetValue(), n)), nil
			}
			if ic == nil {
				return h(ctx, in)
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: echoMethod}, h)
		}},
	},
	Metadata: "dedup/test/payments.proto",
}

// server is a gRPC server on a loopback port with a client connection.
type server struct {
	ic   *dedupgrpc.Interceptor // nil for a bare server
	conn *grpc.ClientConn
	addr string
}

// serve starts svc behind ic (none when nil) and connects a client; both
// stop when t ends.
func serve(t testing.TB, svc *payments, ic *dedupgrpc.Interceptor) *server {
	t.Helper()
	var opts []grpc.ServerOption
	if ic != nil {
		opts = append(opts, grpc.UnaryInterceptor(ic.Unary))
	}
	gs := grpc.NewServer(opts...)
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

// newInterceptor returns an interceptor over st with the test types and a
// principal read from the x-tenant metadata.
func newInterceptor(t testing.TB, st store.Store, opts *dedupgrpc.Options) *dedupgrpc.Interceptor {
	t.Helper()
	o := dedupgrpc.Options{}
	if opts != nil {
		o = *opts
	}
	if o.Types == nil {
		o.Types = testTypes
	}
	if o.Principal == nil && !o.SharedScope {
		o.Principal = tenant
	}
	cfg := dedup.Config{Namespace: "payments"}
	if o.Config != nil {
		cfg = *o.Config
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t, nil)
	}
	o.Config = &cfg
	ic, err := dedupgrpc.New(st, &o)
	require.NoError(t, err)
	return ic
}

// testLogger logs to t, and to also when not nil.
func testLogger(t testing.TB, also io.Writer) *slog.Logger {
	w := io.Writer(tWriter{t})
	if also != nil {
		w = io.MultiWriter(w, also)
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func tenant(ctx context.Context) (string, error) {
	if v := metadata.ValueFromIncomingContext(ctx, "x-tenant"); len(v) == 1 {
		return v[0], nil
	}
	return "", nil
}

// setup starts the test service behind an interceptor over st.
func setup(t testing.TB, st store.Store, opts *dedupgrpc.Options) (*payments, *server) {
	t.Helper()
	svc := &payments{}
	return svc, serve(t, svc, newInterceptor(t, st, opts))
}

// stores are the stores every case runs on.
var stores = []struct {
	name string
	new  func(t testing.TB) store.Store
}{
	{"memstore", func(t testing.TB) store.Store {
		st, err := memstore.New(nil)
		require.NoError(t, err)
		return st
	}},
	{"redis", func(t testing.TB) store.Store {
		c := redistest.Client(t)
		// A busy machine's Redis call may take over a second; what the
		// tests over every store pin is not how fast.
		return newRedisStore(t, c, redistest.Prefix(t, c), 10*time.Second)
	}},
}

// newRedisStore returns a redisstore over c under prefix, whose calls
// give up after timeout.
func newRedisStore(t testing.TB, c redis.UniversalClient, prefix string, timeout time.Duration) *redisstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := redisstore.New(ctx, c, &redisstore.Options{Prefix: prefix, Timeout: timeout})
	require.NoError(t, err)
	return st
}

// eachStore runs f as a subtest for every store.
func eachStore(t *testing.T, f func(t *testing.T, newStore func(testing.TB) store.Store)) {
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			f(t, s.new)
		})
	}
}

// charge is a client call of Charge; md is the outgoing metadata as
// key-value pairs. It returns the reply and the response header.
func (s *server) charge(t testing.TB, req *dynamicpb.Message, md ...string) (*dynamicpb.Message, metadata.MD, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = metadata.NewOutgoingContext(ctx, metadata.Pairs(md...))
	out := dynamicpb.NewMessage(chargeReply)
	var header metadata.MD
	err := s.conn.Invoke(ctx, chargeMethod, req, out, grpc.Header(&header))
	if err != nil {
		return nil, header, err
	}
	return out, header, nil
}

// chargeTrailer is charge that returns the response's header and trailer.
func (s *server) chargeTrailer(t testing.TB, req *dynamicpb.Message, md ...string) (*dynamicpb.Message, metadata.MD, metadata.MD, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = metadata.NewOutgoingContext(ctx, metadata.Pairs(md...))
	out := dynamicpb.NewMessage(chargeReply)
	var header, trailer metadata.MD
	if err := s.conn.Invoke(ctx, chargeMethod, req, out, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
		return nil, header, trailer, err
	}
	return out, header, trailer, nil
}

// echo is a client call of Echo.
func (s *server) echo(t testing.TB, v string, md ...string) (string, metadata.MD, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = metadata.NewOutgoingContext(ctx, metadata.Pairs(md...))
	out := new(wrapperspb.StringValue)
	var header metadata.MD
	err := s.conn.Invoke(ctx, echoMethod, wrapperspb.String(v), out, grpc.Header(&header))
	return out.GetValue(), header, err
}

// chargeReq is a ChargeRequest; key sets its idempotency_key field.
func chargeReq(account string, amount int64, key string) *dynamicpb.Message {
	m := dynamicpb.NewMessage(chargeRequest)
	m.Set(chargeRequest.Fields().ByName("account"), protoreflect.ValueOfString(account))
	m.Set(chargeRequest.Fields().ByName("amount"), protoreflect.ValueOfInt64(amount))
	if key != "" {
		m.Set(chargeRequest.Fields().ByName("idempotency_key"), protoreflect.ValueOfString(key))
	}
	return m
}

// idOf returns the id field of a ChargeReply.
func idOf(m *dynamicpb.Message) string {
	return m.Get(chargeReply.Fields().ByName("id")).String()
}

// wire returns m's deterministic wire form, to compare replays byte for byte.
func wire(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	require.NoError(t, err)
	return b
}

// records counts the records under the interceptor's namespace in st.
func records(t testing.TB, st store.Store) int {
	t.Helper()
	ins, ok := st.(store.Inspector)
	require.True(t, ok, "%T is not a store.Inspector", st)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := 0
	for _, err := range ins.Scan(ctx, "payments:") {
		require.NoError(t, err)
		n++
	}
	return n
}
