package dedupgrpc

import (
	"errors"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo detail on every
// status the interceptor itself answers with; its Reason is one of the
// Reason constants. Clients and gateways read both with ReasonOf.
const ErrorDomain = "github.com/dedup-go/dedup"

// The reasons of the interceptor's own statuses (google.rpc.ErrorInfo).
const (
	// ReasonKeyMissing: InvalidArgument, no key and Options.RequireKey.
	ReasonKeyMissing = "IDEMPOTENCY_KEY_MISSING"
	// ReasonKeyInvalid: InvalidArgument, a key that the Key func refused or
	// that breaks the rules of a key (see Keys in the package
	// documentation), or that Options.KeyCheck refused.
	ReasonKeyInvalid = "IDEMPOTENCY_KEY_INVALID"
	// ReasonKeyForbidden: PermissionDenied, Options.KeyCheck refused the
	// key with ErrKeyForbidden (issued to another principal or operation).
	ReasonKeyForbidden = "IDEMPOTENCY_KEY_FORBIDDEN"
	// ReasonKeyReused: FailedPrecondition, the key was first used with
	// another request.
	ReasonKeyReused = "IDEMPOTENCY_KEY_REUSED"
	// ReasonInFlight: Aborted, another call with the key is running; retry
	// after the RetryInfo delay.
	ReasonInFlight = "IDEMPOTENCY_KEY_IN_FLIGHT"
	// ReasonAttemptsExhausted: FailedPrecondition, calls with the key failed
	// Config.MaxAttempts times; use a new key.
	ReasonAttemptsExhausted = "IDEMPOTENCY_ATTEMPTS_EXHAUSTED"
	// ReasonGivenUp: FailedPrecondition, the key was given up (a call
	// with it failed with a dedup.Permanent error, and the steps it
	// completed were compensated), or its compensations failed
	// Config.MaxAttempts times; use a new key. A key given up because its
	// calls failed MaxAttempts times is answered with
	// ReasonAttemptsExhausted.
	ReasonGivenUp = "IDEMPOTENCY_KEY_GIVEN_UP"
	// ReasonGivingUp: Unavailable, the key is being given up and a
	// compensation of its steps failed; retry with the same key after the
	// RetryInfo delay, and the compensations resume.
	ReasonGivingUp = "IDEMPOTENCY_KEY_GIVING_UP"
	// ReasonResponseNotKept: AlreadyExists, a call with the key succeeded
	// but its response was not kept (over the size limit, or not a proto
	// message), so it cannot be replayed; the call is not run again.
	ReasonResponseNotKept = "IDEMPOTENCY_RESPONSE_NOT_KEPT"
	// ReasonStoreUnavailable: Unavailable, the store could not be reached
	// (fail-closed); retry after the RetryInfo delay.
	ReasonStoreUnavailable = "IDEMPOTENCY_STORE_UNAVAILABLE"
)

// ErrKeyForbidden is what Options.KeyCheck returns (wrapped) for a key
// issued to another principal or for another operation: the call is
// refused with PermissionDenied.
var ErrKeyForbidden = errors.New("dedupgrpc: idempotency key issued to another principal or operation")

// ReasonOf returns the Reason of a status the interceptor answered with
// (err as a client or a gateway gets it), or "" for any other error.
func ReasonOf(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			return info.GetReason()
		}
	}
	return ""
}

// RetryDelayOf returns the delay of the google.rpc.RetryInfo detail of
// err's status, which the interceptor sets on Aborted (in flight) and
// Unavailable (store down, a key being given up), and whether there is
// one.
func RetryDelayOf(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// refuse returns the status error code/msg carrying reason, and a retry
// delay when retry > 0.
func refuse(code codes.Code, reason, msg string, retry time.Duration) error {
	st := status.New(code, msg)
	info := &errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}
	var err error
	if retry > 0 {
		st, err = st.WithDetails(info, &errdetails.RetryInfo{RetryDelay: durationpb.New(retry)})
	} else {
		st, err = st.WithDetails(info)
	}
	if err != nil { // only for a detail that does not marshal: not ours
		return status.Error(code, msg)
	}
	return st.Err()
}
