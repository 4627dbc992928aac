// A grpc-gateway program: a ServeMux whose callers' Idempotency-Key reaches
// the dedupgrpc interceptor. It prints where the header goes.
package main

import (
	"fmt"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	dedupgrpc "github.com/dedup-go/dedup/middleware/grpc"
	dedupgateway "github.com/dedup-go/dedup/middleware/grpc/gateway"
)

func main() {
	mux := runtime.NewServeMux(dedupgateway.ServeMuxOptions()...)
	md, ok := dedupgateway.HeaderMatcher("Idempotency-Key")
	fmt.Println(mux != nil, md == dedupgrpc.MetadataKey, ok)
}
