// Package dedupgrpc runs unary gRPC calls that carry an idempotency key once per
// key, on the same receiver, key rules and stores as dedup's broker
// adapters: a client that retries a call (a flaky network, a gateway that
// replays) gets the first call's response back instead of a second effect.
// Import it next to grpc-go under an alias:
//
//	import (
//		"google.golang.org/grpc"
//
//		"github.com/dedup-go/dedup"
//		dedupgrpc "github.com/dedup-go/dedup/middleware/grpc"
//	)
//
//	ic, err := dedupgrpc.New(store, &dedupgrpc.Options{
//		Config:    &dedup.Config{Namespace: "orders"},
//		Principal: tenantOf, // func(ctx) (string, error), from your authentication
//	})
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(recovery, auth, ic.Unary))
//
// Only unary calls are intercepted; streaming calls are not (install no
// stream interceptor). Package gateway (middleware/grpc/gateway) puts a
// grpc-gateway ServeMux in front, so that an HTTP caller's Idempotency-Key
// reaches the interceptor; it is a module of its own, and this one does
// not require grpc-gateway.
//
// # Keys
//
// Options.Key finds the key: by default the idempotency-key metadata
// ([FromMetadata]; raw, or an RFC 8941 quoted string), else the request's
// string field idempotency_key ([FromField], found through protoreflect on
// any proto message). Options.Key is a dedup.KeyFunc of a [Call], so
// package idstrategy composes key funcs of your own with these
// (idstrategy.FirstOf(FromMetadata(MetadataKey), FromField("request_id"))).
// A key is 1 to 255 bytes of UTF-8 without control characters; one that
// breaks the rules, or that the Key func refuses, is InvalidArgument
// (matching dedup.ErrInvalidKey). A call without a key runs as if the
// interceptor were not there, unless Options.RequireKey.
//
// The key is scoped: the record is the receiver's namespace, the principal
// (Options.Principal: a tenant, a user) and the key, so one tenant is never
// answered with another's response. The id spells the principal out with
// its length ("5:alice:7f3c9a"), so no two scopes share one, and becomes
// "sha256:" and a hash of that when it would exceed the receiver's
// MaxIDLength. The full method is not in the scope but in the fingerprint
// (below): one key sent to another method is refused as reused, as Stripe
// refuses a key on another endpoint. [RecordID] builds a call's id, and
// dedupctl get and forget find its record from --principal and
// --idempotency-key with --middleware grpc.
//
// New refuses Options without a Principal, unless SharedScope is set: then
// every caller's keys are one scope, and a caller that sends another's key
// with the same request gets the other's response. SharedScope is for a
// single-tenant service only.
//
// Options.KeyCheck vets each key with its principal and operation before
// it is used: a server that issues keys itself (signed, bound to a
// principal and an operation) refuses the ones it did not issue with
// InvalidArgument and those issued to someone else with PermissionDenied
// ([ErrKeyForbidden]).
//
// # Fingerprints and replays
//
// The record's fingerprint is the SHA-256 of the full method and the
// request marshalled deterministically (proto.MarshalOptions{Deterministic:
// true}): the same key with another request (another method too) is
// refused with FailedPrecondition, never answered with the first request's
// response. Deterministic marshalling is stable within
// one build of a message type, not across languages or schema versions;
// a schema change that alters the encoding of old requests makes their
// retries mismatch.
//
// A successful response is kept as its message type's full name and its
// wire bytes. A replay unmarshals it into a fresh message of that type,
// resolved by Options.Types and protoregistry.GlobalTypes, and carries
// the response metadata idempotency-replayed: true. A response larger than
// the receiver's MaxResultSize (1 MiB by default here) or that is not a
// proto message still completes the key, so the handler never runs again
// for it; its replays are AlreadyExists with [ReasonResponseNotKept].
// Handler errors are not kept by default: the key is released and the next
// call with it runs the handler again. Options.KeepError keeps the errors
// it selects, replayed like a response.
//
// # Status codes
//
// The interceptor's own refusals carry a google.rpc.ErrorInfo (domain
// [ErrorDomain], a Reason constant; read it with [ReasonOf]) and, when
// retrying helps, a google.rpc.RetryInfo ([RetryDelayOf]):
//
//	no key, RequireKey                      InvalidArgument      IDEMPOTENCY_KEY_MISSING
//	bad key, or refused by KeyCheck         InvalidArgument      IDEMPOTENCY_KEY_INVALID
//	KeyCheck: ErrKeyForbidden               PermissionDenied     IDEMPOTENCY_KEY_FORBIDDEN
//	key in flight (here or elsewhere)       Aborted              IDEMPOTENCY_KEY_IN_FLIGHT, RetryInfo: the receiver's
//	                                                             Result.RetryAfter (about 200 ms, doubling per look
//	                                                             in a row, at most the remaining lease)
//	key used with another request/method    FailedPrecondition   IDEMPOTENCY_KEY_REUSED
//	key failed MaxAttempts times            FailedPrecondition   IDEMPOTENCY_ATTEMPTS_EXHAUSTED
//	key given up (a Permanent error), or    FailedPrecondition   IDEMPOTENCY_KEY_GIVEN_UP
//	  its compensations failed for good
//	a compensation failed, key being        Unavailable          IDEMPOTENCY_KEY_GIVING_UP, RetryInfo: the receiver's
//	  given up                                                   Backoff; retry with the same key
//	response not kept                       AlreadyExists        IDEMPOTENCY_RESPONSE_NOT_KEPT
//	store unavailable, fail-closed          Unavailable          IDEMPOTENCY_STORE_UNAVAILABLE, RetryInfo: StoreRetryDelay
//	handler panicked                        Internal             (the key is released; the stack is logged)
//	handler error                           the handler's own status, unchanged (a dedup.Permanent
//	                                                             mark taken off)
//
// A call whose key is in flight is refused at once, never made to wait:
// the receiver runs in its answer-at-once mode (Config.NoWait), and a call
// that finds the key held, in this process or another, is Aborted.
//
// With Config.FailOpen, a call made while the store is unavailable runs
// unprotected; its response carries idempotency-bypassed: true and the
// receiver logs it at warning level.
//
// # Steps and compensations
//
// A handler may run recorded steps (dedup.Step, with the call's context)
// and the receiver's Config.Compensations undo them when a key is given
// up: when the handler fails with a dedup.Permanent error, or when calls
// with the key failed Config.MaxAttempts times. In the call that gives
// the key up, the compensations of the steps it and the earlier calls
// completed run, in the reverse order of their completion and each once,
// before the call is answered with the handler's own status (a Permanent
// mark taken off: the caller gets the status the handler made). A later
// call with the key does not run the handler: FailedPrecondition
// IDEMPOTENCY_KEY_GIVEN_UP for a key given up for a Permanent error,
// IDEMPOTENCY_ATTEMPTS_EXHAUSTED for one whose calls failed too often. A
// Permanent error with no step completed gives nothing up: the key is
// released as for any error.
//
// A compensation that fails (an error, a panic) makes the call
// Unavailable IDEMPOTENCY_KEY_GIVING_UP with a RetryInfo (the receiver's
// Backoff), in place of the handler's status: the retry with the same key
// resumes the compensations where they stopped, without running the
// handler. Once they failed Config.MaxAttempts times (the failure is
// final, dedup.CompensationError) the call is FailedPrecondition
// IDEMPOTENCY_KEY_GIVEN_UP, naming nothing of what failed; the receiver
// logs it, and each later call with the key tries the compensations again
// while its record is kept.
//
// The interceptor's message is its own: a compensation takes any as its
// message (dedup.Compensate(func(ctx context.Context, _ any, c Charge)
// error)) and finds what it undoes in the step's recorded result; its
// context holds the call's values. Step results are encoded as JSON
// (dedup.JSONCodec), within Config.MaxResultSize: a type of your own
// rather than a generated proto message.
//
// # When the outcome is not recorded
//
// The rule: a handler's response without idempotency-not-stored is one
// that every retry with the key is answered with (replayed; or
// AlreadyExists for a response not kept). A response with
// idempotency-not-stored: true ([NotStoredMetadata]) is one whose handler
// ran (its effect happened) but whose completion could not be confirmed in
// the store: the store failed for as long as the call held the key (the
// receiver retries the completion until its lease ends), or the lease
// ended and another call took the key over. A retry with the key may then
// run the handler again, get another call's response, or, when the
// completion reached the store after all, get this response replayed. The
// flag is always in the trailer metadata, and also in the header metadata
// unless the handler sent the header itself (grpc.SendHeader); package
// gateway turns it into the Idempotency-Not-Stored header. A kept error
// (Options.KeepError) carries it like a response; an error that is not
// kept never does: it releases the key by design.
//
// # Panics
//
// A handler that panics under a key is recovered by the receiver: the key
// is released, the caller gets Internal, the panic and its stack are
// logged, and the server keeps serving. A call without a key, or of a
// method Options.Methods leaves out, runs outside the receiver: grpc-go
// does not recover panics, so keep a recovery interceptor first in the
// chain (go-grpc-middleware's recovery, say) as for any gRPC server.
//
// # Observability
//
// Config.Observer hears one delivery.Event per protected call (a method
// Options.Methods selects) that carries a key, or that RequireKey refuses
// for lacking one; a call without a key that runs unprotected is no event.
// What happened is in the event:
//
//	handler ran, outcome recorded         Status processed, Stored
//	replayed                              Status duplicate, Stored
//	in flight (Aborted)                   Status in-flight
//	key reused (FailedPrecondition)       Err matches dedup.ErrKeyReused
//	outcome not recorded (not-stored)     Status processed, Problem (dedup.ErrLeaseLost,
//	                                      dedup.ErrStoreUnavailable), not Stored
//	handler error, panic                  Err
//	refused by the interceptor itself     Err is a *RefusedError (Code, Reason), matching
//	                                      dedup.ErrNoKey (no key; a Principal that failed),
//	                                      dedup.ErrInvalidKey (a bad key, with the Key func's
//	                                      error; a KeyCheck refusal, with its error; a user
//	                                      func that panicked, with a *dedup.PanicError)
//
// The events of calls the receiver answered come from Handle, as for any
// caller of Handle; the interceptor's own refusals are reported with
// Receiver.Observe (no StartDelivery: they never reach the receiver). Their
// Decision is what Receiver.Decide answers for the error (Reason no-key,
// invalid-key), as Handle's events carry Decide's answer: a gRPC call has
// no adapter to carry an Action out, so read Decision.Reason, a bounded
// label; Settled is always false.
//
// The Origin: Broker "grpc"; Source the full method
// ("/package.Service/Method"); MessageID empty. Header looks the incoming
// metadata up, case-insensitively (traceparent, say), all but the
// idempotency-key metadata: the key is in the event's Key (its record id,
// with the principal), never in the Origin.
//
// The context Observe, the Key, Principal and KeyCheck funcs and the
// handler get is the call's, as the interceptors before this one made it:
// the server span otelgrpc started is in it, and the dedupotel Observer
// annotates that span rather than start one of its own. The interceptor's
// log lines go through slog's *Context methods with the call's context.
//
// # Leases
//
// A call holds its key for the receiver's Lease (30 s by default), which
// the receiver extends while the handler runs. A replica that dies or is
// cut off from the store loses the key when the lease ends, and the next
// call with the key runs the handler again. The replica's handler context
// is cancelled with dedup.ErrLeaseLost as the cause when the lease ends by
// its own clock: a handler that then fails answers Aborted; one that
// succeeds anyway answers its response, which is not kept and carries
// idempotency-not-stored: true (the key belongs to the new holder, whose
// response is replayed).
package dedupgrpc
