package gateway

import (
	"context"
	"net/http"
	"net/textproto"
	"strconv"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	dedupgrpc "github.com/dedup-go/dedup/middleware/grpc"
)

// The HTTP headers of the gateway: the headers of the HTTP middleware
// (deduphttp.HeaderKey, HeaderReplayed, HeaderBypassed, HeaderNotStored),
// which an HTTP client of either reads the same way.
const (
	keyHeader       = "Idempotency-Key"
	replayedHeader  = "Idempotency-Replayed"
	bypassedHeader  = "Idempotency-Bypassed"
	notStoredHeader = "Idempotency-Not-Stored"
)

// ServeMuxOptions returns the options that put a grpc-gateway ServeMux in
// front of the interceptor: HeaderMatcher, OutgoingHeaderMatcher and
// ErrorHandler(nil).
//
//	mux := runtime.NewServeMux(gateway.ServeMuxOptions()...)
func ServeMuxOptions() []runtime.ServeMuxOption {
	return []runtime.ServeMuxOption{
		runtime.WithIncomingHeaderMatcher(HeaderMatcher),
		runtime.WithOutgoingHeaderMatcher(OutgoingHeaderMatcher),
		runtime.WithErrorHandler(ErrorHandler(nil)),
	}
}

// HeaderMatcher is an incoming header matcher
// (runtime.WithIncomingHeaderMatcher) that forwards the Idempotency-Key
// header, raw or as an RFC 8941 quoted string, to the idempotency-key
// metadata the interceptor reads, and every other header as
// runtime.DefaultHeaderMatcher does. A matcher of your own can call it
// first.
func HeaderMatcher(key string) (string, bool) {
	if textproto.CanonicalMIMEHeaderKey(key) == keyHeader {
		return dedupgrpc.MetadataKey, true
	}
	return runtime.DefaultHeaderMatcher(key)
}

// OutgoingHeaderMatcher is an outgoing header matcher
// (runtime.WithOutgoingHeaderMatcher) that turns the interceptor's
// idempotency-replayed, idempotency-bypassed and idempotency-not-stored
// response metadata into the Idempotency-Replayed, Idempotency-Bypassed
// and Idempotency-Not-Stored headers, and forwards the rest as the
// gateway does by default (Grpc-Metadata-<name>).
func OutgoingHeaderMatcher(key string) (string, bool) {
	switch key {
	case dedupgrpc.ReplayedMetadata:
		return replayedHeader, true
	case dedupgrpc.BypassedMetadata:
		return bypassedHeader, true
	case dedupgrpc.NotStoredMetadata:
		return notStoredHeader, true
	}
	return runtime.MetadataHeaderPrefix + key, true
}

// ErrorHandler returns an error handler (runtime.WithErrorHandler) that
// answers the interceptor's statuses as the HTTP middleware does, and
// leaves every other error to next (runtime.DefaultHTTPErrorHandler when
// nil):
//
//	key used with another request (FailedPrecondition)   422 Unprocessable Content
//	key in flight (Aborted)                               409 Conflict, Retry-After
//	store unavailable (Unavailable)                       503 Service Unavailable, Retry-After
//
// 409 and 503 are the gateway's own mapping of Aborted and Unavailable;
// ErrorHandler adds Retry-After from the status's RetryInfo. The 422 is
// passed to next as a *runtime.HTTPStatusError, which
// runtime.DefaultHTTPErrorHandler honours; a handler of your own must too.
func ErrorHandler(next runtime.ErrorHandlerFunc) runtime.ErrorHandlerFunc {
	if next == nil {
		next = runtime.DefaultHTTPErrorHandler
	}
	return func(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
		if d, ok := dedupgrpc.RetryDelayOf(err); ok {
			w.Header().Set("Retry-After", retryAfter(d))
		}
		// The gateway maps Aborted to 409 and Unavailable to 503 itself, but
		// FailedPrecondition to 400.
		if dedupgrpc.ReasonOf(err) == dedupgrpc.ReasonKeyReused {
			err = &runtime.HTTPStatusError{HTTPStatus: http.StatusUnprocessableEntity, Err: err}
		}
		next(ctx, mux, m, w, r, err)
	}
}

// Compile-time checks.
var (
	_ runtime.HeaderMatcherFunc = HeaderMatcher
	_ runtime.HeaderMatcherFunc = OutgoingHeaderMatcher
)

// retryAfter is d in whole seconds, rounded up, at least 1.
func retryAfter(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	return strconv.FormatInt(max(s, 1), 10)
}
