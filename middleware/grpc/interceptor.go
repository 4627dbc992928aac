package dedupgrpc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
)

// The response metadata the interceptor sets.
const (
	// ReplayedMetadata is "true" on a replayed response (or kept error).
	ReplayedMetadata = "idempotency-replayed"
	// BypassedMetadata is "true" on a response whose handler ran
	// unprotected because the store was down and the receiver fail-open.
	BypassedMetadata = "idempotency-bypassed"
	// NotStoredMetadata is "true" on a response whose handler ran but
	// whose outcome could not be recorded: the store failed for as long
	// as the call held the key (its lease), or another call took the key
	// over. A retry with the key may run the handler again (or get
	// another call's response). It is always in the trailer metadata, and
	// also in the header metadata unless the handler sent the header
	// itself (grpc.SendHeader).
	NotStoredMetadata = "idempotency-not-stored"
)

// Interceptor runs unary gRPC calls that carry an idempotency key once per
// key: it claims the key (scoped by principal) in a store,
// runs the handler, keeps its response and replays it to every later call
// with the key. It is safe for concurrent use and holds no goroutine.
type Interceptor struct {
	s   *settings
	rcv *adapter.Receiver[*call, *reply]
	log *slog.Logger
}

// New returns an Interceptor keeping its records in st. Options must set
// Principal, or SharedScope for a single-tenant service. A nil store or
// invalid options (nil options too) are an error matching
// dedup.ErrInvalidConfig.
func New(st store.Store, opts *Options) (*Interceptor, error) {
	s, err := opts.settings()
	if err != nil {
		return nil, err
	}
	s.cfg.Codec = codec{maxSize: s.maxResponse, types: s.Types}
	ic := &Interceptor{s: s}
	rcv, err := dedup.NewReceiver(st, idOf, ic.run, &s.cfg)
	if err != nil {
		return nil, fmt.Errorf("dedupgrpc: %w", err)
	}
	ic.rcv = adapter.Bind(rcv)
	ic.log = ic.rcv.Logger()
	return ic, nil
}

// Stats returns the counters of the interceptor's receiver.
func (ic *Interceptor) Stats() dedup.Stats { return ic.rcv.Stats() }

// Unary is the grpc.UnaryServerInterceptor:
//
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(recovery, auth, ic.Unary))
//
// Streaming calls are not intercepted: install no stream interceptor.
func (ic *Interceptor) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if ic.s.Methods != nil && !ic.s.Methods(info.FullMethod) {
		return handler(ctx, req)
	}
	c, err, cause := ic.newCall(ctx, req, info.FullMethod, handler)
	if err != nil {
		return nil, ic.refuse(ctx, info.FullMethod, err, cause)
	}
	if c == nil {
		return handler(ctx, req)
	}
	res, err := ic.rcv.Handle(ctx, c)
	if err != nil {
		return nil, ic.failed(ctx, c, res, err)
	}
	return ic.answer(ctx, c, res)
}

// call is one unary call through the receiver, its message type.
type call struct {
	// ctx is the call's, for its Origin's metadata.
	ctx     context.Context
	id      string // the scoped id
	method  string
	req     any
	handler grpc.UnaryHandler
}

// idOf is the receiver's KeyFunc: the id is found (with the caller's
// context) before the receiver is asked.
func idOf(c *call) (string, error) { return c.id, nil }

// Fingerprint hashes the full method and the request marshalled
// deterministically, so that the same key with another request is refused
// with FailedPrecondition.
func (c *call) Fingerprint() (string, error) {
	m, ok := c.req.(proto.Message)
	if !ok {
		return "", fmt.Errorf("the request is a %T, not a proto message", c.req)
	}
	bp := fpBuffers.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooledBuffer { // a huge request's buffer is left to the GC
			fpBuffers.Put(bp)
		}
	}()
	buf := append((*bp)[:0], c.method...)
	buf = append(buf, 0)
	buf, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(buf, m)
	if err != nil {
		return "", err
	}
	*bp = buf
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:]), nil
}

// fpBuffers holds the buffers requests are marshalled into for their
// fingerprint, which only the hash outlives.
var fpBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

const maxPooledBuffer = 64 << 10

// Compile-time checks.
var (
	_ grpc.UnaryServerInterceptor = (*Interceptor)(nil).Unary
	_ adapter.Fingerprinter       = (*call)(nil)
)

// newCall finds the call's key, principal and scoped id. It returns nil
// and no error for a call without a key that may run unprotected; for a
// call it refuses, the status to answer and, for the Observer, the cause
// (see RefusedError).
func (ic *Interceptor) newCall(ctx context.Context, req any, method string, handler grpc.UnaryHandler) (c *call, st, cause error) {
	defer func() {
		if p := recover(); p != nil {
			stack := debug.Stack()
			ic.log.ErrorContext(ctx, "dedupgrpc: a Key, Principal or KeyCheck func panicked",
				slog.String("method", method), slog.Any("panic", p), slog.String("stack", string(stack)))
			c, st = nil, status.Error(codes.Internal, "dedupgrpc: the idempotency key could not be checked")
			cause = fmt.Errorf("%w: %w", dedup.ErrInvalidKey, &dedup.PanicError{Func: "Key, Principal or KeyCheck func", Value: p, Stack: stack})
		}
	}()
	key, err := ic.s.Key(Call{Ctx: ctx, FullMethod: method, Req: req})
	if err != nil && !errors.Is(err, dedup.ErrNoKey) {
		return nil, keyError(err), invalidKey(err)
	}
	if key == "" || err != nil {
		if ic.s.RequireKey {
			return nil, refuse(codes.InvalidArgument, ReasonKeyMissing, "dedupgrpc: this method requires an idempotency key ("+MetadataKey+" metadata)", 0), dedup.ErrNoKey
		}
		return nil, nil, nil
	}
	if err := validateKey(key); err != nil {
		return nil, keyError(err), err
	}
	var principal string
	if ic.s.Principal != nil {
		if principal, err = ic.s.Principal(ctx); err != nil {
			// No scope to put the key in: no usable key, as the receiver
			// takes a failing key func.
			cause := fmt.Errorf("%w: the principal: %w", dedup.ErrNoKey, err)
			if _, ok := status.FromError(err); ok {
				return nil, err, cause
			}
			return nil, status.Error(codes.Unauthenticated, err.Error()), cause
		}
	}
	if ic.s.KeyCheck != nil {
		if err := ic.s.KeyCheck(ctx, key, principal, method); err != nil {
			return nil, checkError(err), invalidKey(err)
		}
	}
	// The scope is the principal alone: the method is in the fingerprint,
	// so that the key on another method is refused as reused.
	return &call{ctx: ctx, id: scopedID(principal, key, ic.s.maxIDLength), method: method, req: req, handler: handler}, nil, nil
}

// invalidKey makes err, a Key or KeyCheck func's, match dedup.ErrInvalidKey.
func invalidKey(err error) error {
	if errors.Is(err, dedup.ErrInvalidKey) {
		return err
	}
	return fmt.Errorf("%w: %w", dedup.ErrInvalidKey, err)
}

// keyError is the status of a key that cannot be used.
func keyError(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	return refuse(codes.InvalidArgument, ReasonKeyInvalid, err.Error(), 0)
}

// checkError is the status of a key Options.KeyCheck refused.
func checkError(err error) error {
	switch _, ok := status.FromError(err); {
	case ok:
		return err
	case errors.Is(err, ErrKeyForbidden):
		return refuse(codes.PermissionDenied, ReasonKeyForbidden, err.Error(), 0)
	}
	return refuse(codes.InvalidArgument, ReasonKeyInvalid, err.Error(), 0)
}

// run is the receiver's handler: the gRPC handler, whose error is kept
// only when Options.KeepError says so (and the call was not cancelled).
func (ic *Interceptor) run(ctx context.Context, c *call) (*reply, error) {
	resp, err := c.handler(ctx, c.req)
	if err == nil {
		return &reply{resp: resp}, nil
	}
	if ic.s.KeepError != nil && ctx.Err() == nil && ic.s.KeepError(c.method, err) {
		return &reply{err: status.Convert(unmarked(err))}, nil
	}
	return nil, err
}

// answer turns a done (or in-flight) Result into the call's answer.
func (ic *Interceptor) answer(ctx context.Context, c *call, res dedup.Result[*reply]) (any, error) {
	r := res.Value
	switch res.Status {
	case delivery.StatusInFlight:
		return nil, refuse(codes.Aborted, ReasonInFlight, "dedupgrpc: a call with this idempotency key is in progress; retry later", res.RetryAfter)
	case delivery.StatusDuplicate:
		switch {
		case r == nil:
			// The receiver logged why (ErrResultUndecodable).
			return nil, status.Error(codes.Internal, "dedupgrpc: a call with this idempotency key succeeded, but its kept response cannot be replayed")
		case r.notKept != "":
			return nil, refuse(codes.AlreadyExists, ReasonResponseNotKept, "dedupgrpc: a call with this idempotency key succeeded, but its response was not kept: "+r.notKept, 0)
		}
		setHeader(ctx, ReplayedMetadata)
	case delivery.StatusBypassed:
		setHeader(ctx, BypassedMetadata)
	case delivery.StatusProcessed:
		if notStored(res.Problem) {
			ic.log.WarnContext(ctx, "dedupgrpc: the call is answered, but its outcome was not recorded; a retry with the key may run the handler again",
				slog.String("method", c.method))
			setNotStored(ctx)
		}
	}
	if r.err != nil {
		return nil, r.err.Err()
	}
	return r.resp, nil
}

// setHeader sets name: true on the response metadata, when there is a
// response: not for a caller of Unary outside a gRPC server.
func setHeader(ctx context.Context, name string) {
	if grpc.ServerTransportStreamFromContext(ctx) == nil {
		return
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(name, "true"))
}

// notStored reports whether a done outcome's Problem means that the call's
// record was not completed: the store failed for as long as the lease
// held, or another call took the key over. A result that could not be
// encoded is not one: the record completed without it.
func notStored(problem error) bool {
	return problem != nil && (errors.Is(problem, dedup.ErrLeaseLost) || errors.Is(problem, dedup.ErrStoreUnavailable))
}

// setNotStored sets NotStoredMetadata in the trailer, and in the header
// unless the handler already sent it.
func setNotStored(ctx context.Context) {
	if grpc.ServerTransportStreamFromContext(ctx) == nil {
		return
	}
	md := metadata.Pairs(NotStoredMetadata, "true")
	_ = grpc.SetTrailer(ctx, md)
	_ = grpc.SetHeader(ctx, md) // fails when the header went out: the trailer says it
}

// failed turns an error of Handle into the call's status.
func (ic *Interceptor) failed(ctx context.Context, c *call, res dedup.Result[*reply], err error) error {
	var (
		perr *dedup.PanicError
		herr *dedup.HandlerError
		cerr *dedup.CompensationError
		gerr *dedup.GivenUpError
	)
	switch {
	case errors.As(err, &cerr):
		// Before a panic: a compensation's panic is in cerr, and it is not
		// the handler's. The receiver logged the compensation's error; the
		// caller is told nothing of it.
		if cerr.Final {
			return givenUp(delivery.ReasonCompensationFailed)
		}
		return refuse(codes.Unavailable, ReasonGivingUp, "dedupgrpc: calls with this idempotency key were given up, and what they did is being undone; retry with the same key to finish",
			max(ic.rcv.Decide(res, err).Delay, time.Millisecond))
	case errors.As(err, &gerr):
		return givenUp(gerr.Reason)
	case errors.As(err, &perr):
		ic.log.ErrorContext(ctx, "dedupgrpc: the handler panicked; the key is released",
			slog.String("method", c.method), slog.Any("panic", perr.Value), slog.String("stack", string(perr.Stack)))
		return status.Error(codes.Internal, "dedupgrpc: the handler panicked")
	case errors.Is(err, dedup.ErrLeaseLost):
		return refuse(codes.Aborted, ReasonInFlight, "dedupgrpc: another call took this idempotency key over; retry later", 0)
	case errors.Is(err, dedup.ErrCanceled):
		if cerr := ctx.Err(); cerr != nil {
			return status.FromContextError(cerr).Err()
		}
		return status.Error(codes.Canceled, err.Error())
	case errors.As(err, &herr):
		return unmarked(herr.Err)
	case errors.Is(err, dedup.ErrKeyReused):
		return refuse(codes.FailedPrecondition, ReasonKeyReused, "dedupgrpc: this idempotency key was used with another request", 0)
	case errors.Is(err, dedup.ErrAttemptsExhausted):
		return refuse(codes.FailedPrecondition, ReasonAttemptsExhausted, "dedupgrpc: calls with this idempotency key failed too often; use a new key", 0)
	case errors.Is(err, dedup.ErrStoreUnavailable):
		// The receiver logged the store's error; the caller is not told
		// where the store lives.
		return refuse(codes.Unavailable, ReasonStoreUnavailable, "dedupgrpc: the idempotency store is unavailable; retry later", ic.rcv.StoreRetryDelay())
	case errors.Is(err, dedup.ErrUndecodable):
		return status.Error(codes.InvalidArgument, "dedupgrpc: the request cannot be fingerprinted: "+err.Error())
	case errors.Is(err, dedup.ErrInvalidKey), errors.Is(err, dedup.ErrNoKey):
		return refuse(codes.InvalidArgument, ReasonKeyInvalid, err.Error(), 0)
	}
	ic.log.ErrorContext(ctx, "dedupgrpc: unexpected error", slog.String("method", c.method), slog.Any("error", err))
	return status.Error(codes.Internal, "dedupgrpc: "+err.Error())
}

// givenUp is the status of a call whose key was given up (see Steps and
// compensations in the package documentation) for reason: one given up
// because its calls failed MaxAttempts times is answered as any key whose
// attempts are exhausted.
func givenUp(reason delivery.Reason) error {
	if reason == delivery.ReasonAttemptsExhausted {
		return refuse(codes.FailedPrecondition, ReasonAttemptsExhausted, "dedupgrpc: calls with this idempotency key failed too often; use a new key", 0)
	}
	return refuse(codes.FailedPrecondition, ReasonGivenUp, "dedupgrpc: calls with this idempotency key were given up; use a new key", 0)
}

// permanentType is the type of the mark dedup.Permanent puts on an error.
var permanentType = reflect.TypeOf(dedup.Permanent(errors.New("")))

// unmarked returns a handler's error without the dedup.Permanent marks
// around it: status.FromError would take a mark for a wrapping and make
// the whole error's text the status's message, where the caller must get
// the handler's status as it made it.
func unmarked(err error) error {
	for err != nil && reflect.TypeOf(err) == permanentType {
		err = errors.Unwrap(err)
	}
	return err
}
