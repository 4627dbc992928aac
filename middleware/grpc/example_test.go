package dedupgrpc_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dedup-go/dedup"
	dedupgrpc "github.com/dedup-go/dedup/middleware/grpc"
	"github.com/dedup-go/dedup/store/memstore"
)

// A client retries Submit with the same idempotency-key: the order is
// placed once, the retry gets the first receipt back, and the key reused
// for another order is refused.
func Example() {
	st, err := memstore.New(nil) // redisstore when several replicas serve
	if err != nil {
		log.Fatal(err)
	}
	ic, err := dedupgrpc.New(st, &dedupgrpc.Options{
		Config: &dedup.Config{Namespace: "orders"},
		// Whose keys these are: from your authentication, in real life.
		Principal: func(ctx context.Context) (string, error) { return "tenant-1", nil },
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary))
	srv.RegisterService(&ordersDesc, &orders{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ln) })
	defer wg.Wait()
	defer srv.Stop()

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	submit := func(key, order string) {
		ctx := metadata.AppendToOutgoingContext(context.Background(), dedupgrpc.MetadataKey, key)
		var header metadata.MD
		receipt := new(wrapperspb.StringValue)
		err := conn.Invoke(ctx, "/shop.Orders/Submit", wrapperspb.String(order), receipt, grpc.Header(&header))
		if err != nil {
			fmt.Println(status.Code(err), dedupgrpc.ReasonOf(err))
			return
		}
		fmt.Printf("%s (replayed: %v)\n", receipt.GetValue(), header.Get(dedupgrpc.ReplayedMetadata))
	}
	submit("7f3c9a", "2 books")
	submit("7f3c9a", "2 books") // the client retries: the network dropped the answer
	submit("7f3c9a", "3 books")
	submit("b81d42", "3 books")
	// Output:
	// receipt-1 for 2 books (replayed: [])
	// receipt-1 for 2 books (replayed: [true])
	// FailedPrecondition IDEMPOTENCY_KEY_REUSED
	// receipt-2 for 3 books (replayed: [])
}

// orders is a service written out by hand, as protoc would generate it for
//
//	service Orders { rpc Submit(google.protobuf.StringValue) returns (google.protobuf.StringValue); }
type orders struct{ placed atomic.Int64 }

type ordersServer interface {
	Submit(ctx context.Context, order *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
}

func (o *orders) Submit(ctx context.Context, order *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return wrapperspb.String(fmt.Sprintf("receipt-%d for %s", o.placed.Add(1), order.GetValue())), nil
}

var ordersDesc = grpc.ServiceDesc{
	ServiceName: "shop.Orders",
	HandlerType: (*ordersServer)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Submit", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		submit := func(ctx context.Context, req any) (any, error) {
			return srv.(ordersServer).Submit(ctx, req.(*wrapperspb.StringValue))
		}
		if ic == nil {
			return submit(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/shop.Orders/Submit"}, submit)
	}}},
}
