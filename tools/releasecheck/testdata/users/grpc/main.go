// A gRPC program: a server whose unary calls run once per idempotency key.
// It serves only when run with the argument "run".
package main

import (
	"context"
	"fmt"
	"net"
	"os"

	"google.golang.org/grpc"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/idstrategy"
	dedupgrpc "github.com/dedup-go/dedup/middleware/grpc"
	"github.com/dedup-go/dedup/store/memstore"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == "run" {
		if err := run(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	fmt.Println(dedupgrpc.MetadataKey, dedupgrpc.BrokerGRPC)
}

func run(addr string) error {
	st, err := memstore.New(nil)
	if err != nil {
		return err
	}
	ic, err := dedupgrpc.New(st, &dedupgrpc.Options{
		Config:    &dedup.Config{Namespace: "orders"},
		Principal: func(ctx context.Context) (string, error) { return "tenant-1", nil },
		Key:       idstrategy.FirstOf(dedupgrpc.FromMetadata(dedupgrpc.MetadataKey), dedupgrpc.FromField("request_id")),
	})
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer srv.Stop()
	return srv.Serve(ln)
}
