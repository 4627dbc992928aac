package dedupgrpc_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dedup-go/dedup"
	dedupgrpc "github.com/dedup-go/dedup/middleware/grpc"
	"github.com/dedup-go/dedup/store/memstore"
)

// The benchmarks use a generated message type (StringValue), as servers
// do: dynamicpb messages marshal through reflection, several times slower.

// BenchmarkUnary: a unary call through a real server and client on
// loopback, bare beside the interceptor over memstore, for a first call
// (a new key each time) and a replay (one key), in the same run.
func BenchmarkUnary(b *testing.B) {
	req := wrapperspb.String("order-1")
	bench := func(b *testing.B, ic *dedupgrpc.Interceptor, key func(i int) string) {
		s := serve(b, &payments{}, ic)
		out := new(wrapperspb.StringValue)
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			cctx := metadata.AppendToOutgoingContext(ctx, dedupgrpc.MetadataKey, key(i))
			if err := s.conn.Invoke(cctx, echoMethod, req, out); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("bare", func(b *testing.B) { bench(b, nil, strconv.Itoa) })
	b.Run("first", func(b *testing.B) { bench(b, benchInterceptor(b), strconv.Itoa) })
	b.Run("replay", func(b *testing.B) { bench(b, benchInterceptor(b), func(int) string { return "k-1" }) })
}

// BenchmarkInterceptor: the interceptor's own cost, calling Unary in
// process (no network, no gRPC codec), beside calling the handler bare.
func BenchmarkInterceptor(b *testing.B) {
	req := wrapperspb.String("order-1")
	handler := func(ctx context.Context, r any) (any, error) {
		return wrapperspb.String("receipt for " + r.(*wrapperspb.StringValue).GetValue()), nil
	}
	info := &grpc.UnaryServerInfo{Server: &payments{}, FullMethod: echoMethod}
	bench := func(b *testing.B, call grpc.UnaryServerInterceptor, key func(i int) string) {
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			cctx := metadata.NewIncomingContext(ctx, metadata.MD{dedupgrpc.MetadataKey: {key(i)}})
			if _, err := call(cctx, req, info, handler); err != nil {
				b.Fatal(err)
			}
		}
	}
	bare := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req)
	}
	b.Run("bare", func(b *testing.B) { bench(b, bare, strconv.Itoa) })
	b.Run("first", func(b *testing.B) { bench(b, benchInterceptor(b).Unary, strconv.Itoa) })
	b.Run("replay", func(b *testing.B) { bench(b, benchInterceptor(b).Unary, func(int) string { return "k-1" }) })
}

func benchInterceptor(b *testing.B) *dedupgrpc.Interceptor {
	st, err := memstore.New(&memstore.Options{Capacity: 1 << 20})
	require.NoError(b, err)
	ic, err := dedupgrpc.New(st, &dedupgrpc.Options{Types: testTypes, SharedScope: true, Config: &dedup.Config{Namespace: "payments"}})
	require.NoError(b, err)
	return ic
}
