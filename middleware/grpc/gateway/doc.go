// Package gateway puts a grpc-gateway ServeMux in front of the dedupgrpc
// interceptor, so that an HTTP caller's Idempotency-Key protects a unary
// method the same way the idempotency-key metadata does for a gRPC caller,
// and the interceptor's refusals get the HTTP statuses of dedup's HTTP
// middleware. Import it under an alias:
//
//	import (
//		"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
//
//		dedupgateway "github.com/dedup-go/dedup/middleware/grpc/gateway"
//	)
//
//	mux := runtime.NewServeMux(dedupgateway.ServeMuxOptions()...)
//
// It is a module of its own (github.com/dedup-go/dedup/middleware/grpc/gateway)
// so that a server without a gateway never has grpc-gateway in its module
// graph: the dedupgrpc module does not require it.
//
// # What it does
//
//   - [HeaderMatcher] forwards Idempotency-Key (raw, or an RFC 8941 quoted
//     string, which the interceptor unquotes) to the idempotency-key
//     metadata; other headers go as runtime.DefaultHeaderMatcher sends them.
//   - [OutgoingHeaderMatcher] turns the idempotency-replayed,
//     idempotency-bypassed and idempotency-not-stored response metadata
//     into Idempotency-Replayed: true, Idempotency-Bypassed: true and
//     Idempotency-Not-Stored: true.
//   - [ErrorHandler] answers a key used with another request with 422, a key
//     in flight with 409 and a store that is down with 503, the last two
//     with Retry-After; other statuses map as the gateway maps them (a
//     missing or bad key, InvalidArgument, is 400; PermissionDenied 403; a
//     response that was not kept, AlreadyExists, 409).
package gateway
