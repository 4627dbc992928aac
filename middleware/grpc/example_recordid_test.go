package dedupgrpc_test

import (
	"context"
	"fmt"
	"log"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dedup-go/dedup"
	dedupgrpc "github.com/dedup-go/dedup/middleware/grpc"
	"github.com/dedup-go/dedup/store/memstore"
)

// A support request: tenant acme's Pay call with idempotency-key pay-7
// must be run again. RecordID names its record, found in the store as
// dedupctl does it: dedupctl get --namespace payments-grpc --middleware
// grpc --principal acme --idempotency-key pay-7.
func ExampleRecordID() {
	st, err := memstore.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	ic, err := dedupgrpc.New(st, &dedupgrpc.Options{
		Config:    &dedup.Config{Namespace: "payments-grpc"},
		Principal: func(context.Context) (string, error) { return "acme", nil },
	})
	if err != nil {
		log.Fatal(err)
	}
	// The interceptor as grpc-go calls it for a unary call.
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(dedupgrpc.MetadataKey, "pay-7"))
	pay := func(context.Context, any) (any, error) { return wrapperspb.String("paid"), nil }
	if _, err := ic.Unary(ctx, wrapperspb.String("order 1"), &grpc.UnaryServerInfo{FullMethod: "/shop.Payments/Pay"}, pay); err != nil {
		log.Fatal(err)
	}

	key := "payments-grpc:" + dedupgrpc.RecordID("acme", "pay-7", 0)
	fmt.Println(key)
	rec, err := st.Get(context.Background(), key)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(rec.State)
	// Output:
	// payments-grpc:4:acme:pay-7
	// completed
}
