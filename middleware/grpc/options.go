package dedupgrpc

import (
	"cmp"
	"context"
	"fmt"

	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
)

// defaultMaxResponseSize is the largest marshalled response kept for
// replay when Options.Config leaves MaxResultSize zero.
const defaultMaxResponseSize = 1 << 20

// Options configures an Interceptor. A nil *Options means all defaults;
// but whose keys are whose has no default (Principal, or SharedScope for a
// single-tenant service), so New refuses a nil *Options, as it refuses
// options that set neither. Any other zero field takes its default.
type Options struct {
	// Config configures the receiver under the interceptor: Namespace (set
	// it, one per service), Lease, Retention, MaxAttempts, FailOpen,
	// StoreTimeout, MaxIDLength, Logger, Observer, Clock, Compensations
	// (see Steps and compensations in the package documentation). NoWait
	// is always set: a call never waits for another. Codec must be nil:
	// responses are kept in the interceptor's own encoding (step results
	// as JSON). MaxResultSize is the largest
	// marshalled response kept (a larger one completes the key without it;
	// see the package documentation). Defaults to nil: the receiver's
	// defaults, with MaxResultSize 1 MiB.
	Config *dedup.Config

	// Key finds a call's idempotency key: FromMetadata, FromField, a func
	// of yours, or any composition of them with package idstrategy
	// (idstrategy.FirstOf to try several). A call without a key is an
	// error matching dedup.ErrNoKey (or an empty key with no error); any
	// other error refuses the call: one carrying a gRPC status is returned
	// as is, another is InvalidArgument. Every key found is checked
	// against the rules of a key (see the package documentation).
	// Defaults to nil: the idempotency-key metadata, else the request's
	// idempotency_key string field (what
	// idstrategy.FirstOf(FromMetadata(MetadataKey), FromField(FieldName))
	// finds).
	Key dedup.KeyFunc[Call]

	// Principal names the caller (a tenant, a user) whose keys are kept
	// apart from every other caller's: the same key from two principals is
	// two operations. An error carrying a gRPC status is returned as is;
	// any other is Unauthenticated. Required unless SharedScope: New
	// refuses options with neither.
	Principal func(ctx context.Context) (string, error)

	// SharedScope, with no Principal, puts every caller's keys in one
	// scope: two callers that pick the same key for the same request get
	// one record, and the second is answered with the first one's
	// response. It is right only for a single-tenant service (one client,
	// or clients that trust each other). Setting it with Principal is an
	// error. Defaults to false.
	SharedScope bool

	// KeyCheck, when set, vets every key before it is used, with the
	// principal and the operation (the full method): a server that issues
	// keys itself refuses the ones it did not issue, or issued to another
	// principal or for another operation. An error carrying a gRPC status
	// is returned as is, one matching ErrKeyForbidden is PermissionDenied,
	// any other InvalidArgument. Defaults to nil: every well-formed key is
	// accepted.
	KeyCheck func(ctx context.Context, key, principal, operation string) error

	// Methods selects the unary methods the interceptor protects, by full
	// method ("/package.Service/Method"); the others run untouched.
	// Defaults to nil: every unary method.
	Methods func(fullMethod string) bool

	// RequireKey refuses a protected call without a key (InvalidArgument)
	// instead of running it unprotected. Defaults to false: a call without
	// a key runs as if the interceptor were not there.
	RequireKey bool

	// KeepError decides whether a handler error is kept and replayed like
	// a response, for teams that want a retried call answered with the
	// first call's error (an InvalidArgument, say) instead of run again.
	// Defaults to nil: no error is kept; an error releases the key and the
	// next call with it runs the handler again.
	KeepError func(fullMethod string, err error) bool

	// Types resolves the type of a kept response by its full name, to
	// replay it into a fresh message of that type; a type it does not know
	// is looked up in protoregistry.GlobalTypes, where generated code
	// registers every message. A server that answers with dynamicpb
	// messages passes a protoregistry.Types holding their types. Defaults
	// to protoregistry.GlobalTypes.
	Types protoregistry.MessageTypeResolver
}

// settings is Options with its defaults filled and the receiver's Config
// resolved.
type settings struct {
	Options
	cfg         dedup.Config
	maxResponse int
	maxIDLength int
}

func (o *Options) settings() (*settings, error) {
	s := &settings{}
	if o != nil {
		s.Options = *o
	}
	if s.Config != nil {
		s.cfg = *s.Config
	}
	if s.cfg.Codec != nil {
		return nil, fmt.Errorf("%w: Options.Config.Codec must be nil: the interceptor keeps responses in its own encoding", dedup.ErrInvalidConfig)
	}
	switch {
	case s.Principal == nil && !s.SharedScope:
		return nil, fmt.Errorf("%w: Options.Principal is not set: set it to keep each caller's keys apart, or set SharedScope for a single-tenant service", dedup.ErrInvalidConfig)
	case s.Principal != nil && s.SharedScope:
		return nil, fmt.Errorf("%w: Options.Principal and SharedScope are both set; set one", dedup.ErrInvalidConfig)
	}
	if s.cfg.MaxResultSize < 0 || s.cfg.MaxIDLength < 0 {
		// NewReceiver reports these with the receiver's wording.
		return s, nil
	}
	s.cfg.NoWait = true
	s.maxResponse = cmp.Or(s.cfg.MaxResultSize, defaultMaxResponseSize)
	// The receiver's own cap stays above ours, so that a response over ours
	// is kept as a small "not kept" record (see codec) rather than dropped.
	s.cfg.MaxResultSize = s.maxResponse + notKeptSlack
	s.maxIDLength = cmp.Or(s.cfg.MaxIDLength, adapter.DefaultMaxIDLength)
	if s.maxIDLength < hashedIDLength {
		return nil, fmt.Errorf("%w: Options.Config.MaxIDLength is %d; the interceptor needs at least %d for its scoped keys", dedup.ErrInvalidConfig, s.maxIDLength, hashedIDLength)
	}
	if s.Key == nil {
		s.Key = defaultKey()
	}
	if s.Types == nil {
		s.Types = protoregistry.GlobalTypes
	}
	return s, nil
}
