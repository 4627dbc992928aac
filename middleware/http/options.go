package deduphttp

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/middleware/http/issuedkey"
)

// Defaults of Options.
const (
	defaultMaxResponseSize    = 1 << 20
	defaultMaxRequestSize     = 1 << 20
	defaultInFlightRetryAfter = time.Second
	// headerRoom is what the receiver's MaxResultSize allows beyond
	// MaxResponseSize, for the status and the stored headers.
	headerRoom = 64 << 10
)

// defaultMethods are the methods the middleware applies to by default: the
// ones HTTP does not define as idempotent.
var defaultMethods = []string{http.MethodPost, http.MethodPatch}

// defaultReplayHeaders are the response headers stored and replayed
// whatever Options.ReplayHeaders adds.
var defaultReplayHeaders = []string{"Content-Type", "Content-Encoding", "Content-Language", "Content-Disposition", "Location"}

// neverReplayed are headers that must never be replayed to another
// request: credentials and hop-by-hop headers. Content-Length is computed
// from the replayed body.
var neverReplayed = []string{
	"Set-Cookie", "Authorization", "Proxy-Authorization", "Proxy-Authenticate", "Www-Authenticate",
	"Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length",
	HeaderReplayed, HeaderBypassed, HeaderNotStored,
}

// Options configures a Middleware. A nil *Options means all defaults;
// but whose keys are whose has no default (Principal, or SharedScope for a
// single-tenant service), so New refuses a nil *Options, as it refuses
// options that set neither. Any other zero field takes its default.
type Options struct {
	// Config configures the receiver under the middleware: set Namespace
	// (one per service), Lease, Retention, MaxAttempts, FailOpen, Logger,
	// Observer, StoreRetryDelay, Clock, Compensations there (see Steps and
	// compensations in the package documentation). The middleware sets
	// NoWait (a request never waits for another), its own Codec (a Codec
	// set here is an error; it encodes step results as JSON), and raises MaxResultSize to MaxResponseSize plus 64 KiB
	// for the headers when it is lower; a MaxIDLength below 299 is an
	// error. Defaults to nil: the receiver's defaults.
	Config *dedup.Config

	// Methods are the request methods deduplicated; others pass through
	// untouched. Defaults to POST and PATCH, the methods HTTP does not
	// define as idempotent.
	Methods []string

	// RequireKey answers a request without an Idempotency-Key with 400.
	// Defaults to false: such a request passes through, unprotected.
	RequireKey bool

	// KeySource, when set, reads each request's key instead of the
	// Idempotency-Key header: an id the client sends in a header or in the
	// body (see KeySource; NewWebhook for webhook senders). It runs after
	// the body is read, within MaxRequestSize. Its errors are 400 problems:
	// a request whose key cannot be read never passes through, whatever
	// RequireKey says. Setting it with Verifier (which reads issued keys
	// from the Idempotency-Key header) is an error. Defaults to nil: the
	// Idempotency-Key header.
	KeySource KeySource

	// Principal names the caller (tenant, user) from the request, typically
	// from what an authentication middleware put in its context. Keys are
	// scoped by it: one principal is never answered with another's
	// response. Required unless SharedScope: New refuses options with
	// neither.
	Principal func(r *http.Request) string

	// SharedScope, with no Principal, puts every caller's keys in one
	// scope: two callers that send the same key get one record, and the
	// second may be answered with the first one's response. It is right
	// only for a single-tenant service (one client, or clients that trust
	// each other). Setting it with Principal is an error. Defaults to
	// false.
	SharedScope bool

	// Operation, when set, names what the request does: a key's scope is
	// then (principal, operation, key), so that one key may be used once
	// per operation. It is also what a server-issued key is bound to (see
	// Verifier). A mux sets r.Pattern only after routing: return it here
	// ("POST /orders/{id}/pay") when the middleware wraps each route's
	// handler rather than the mux, or name each route yourself. Defaults
	// to nil: the scope is (principal, key), so the key used on another
	// method or path is refused as reused (the method and path are in the
	// fingerprint); a server-issued key is then bound to the method, a
	// space and the path as received (r.URL.EscapedPath()), as in
	// "POST /orders/o-1/pay".
	Operation func(r *http.Request) string

	// Verifier, when set, accepts only server-issued keys (see package
	// issuedkey): a key it did not issue is 400, issued to another
	// principal 403, for another operation 422. An expired key is still
	// answered with the replay of its completed record while the store
	// keeps it (Config.Retention), and is 400 otherwise: it never runs the
	// handler. Defaults to nil: clients choose their keys.
	Verifier issuedkey.Verifier

	// MismatchStatus answers a key reused with another request (method,
	// path, query or body: another endpoint too): 422 Unprocessable
	// Content or 409 Conflict. Defaults to 422.
	MismatchStatus int

	// MaxResponseSize is the largest response body kept for replays, in
	// bytes. A larger response still completes the key (the handler never
	// runs again for it) and goes out as it is written; its replays get
	// 410 Gone with a problem saying it was too large to keep. Defaults to
	// 1 MiB.
	MaxResponseSize int

	// MaxRequestSize is the largest request body accepted, in bytes: the
	// middleware reads the body to fingerprint it. A larger one gets 413
	// and the handler does not run. Defaults to 1 MiB.
	MaxRequestSize int64

	// ReplayHeaders are response headers stored and replayed beside
	// Content-Type, Content-Encoding, Content-Language,
	// Content-Disposition and Location, which always are. Credentials (Set-Cookie, Authorization...) and
	// hop-by-hop headers are refused. Defaults to none.
	ReplayHeaders []string

	// StoreStatus decides from its status whether a response completes the
	// key (and is replayed) or releases it (the client may retry and the
	// handler runs again). Return true for every status to store every
	// outcome, as some payment APIs do; panics and streamed responses
	// release the key whatever it says. Defaults to DefaultStoreStatus:
	// 2xx, 3xx and 4xx except 429 are stored.
	StoreStatus func(status int) bool

	// InFlightRetryAfter is the Retry-After of a 409 answered to a request
	// whose key is in flight, bounded by what remains of the holder's lease
	// and rounded up to whole seconds. Defaults to 1s.
	InFlightRetryAfter time.Duration
}

// DefaultStoreStatus is the default of Options.StoreStatus: 2xx, 3xx and
// 4xx except 429 are stored.
func DefaultStoreStatus(status int) bool {
	return status >= 200 && status < 500 && status != http.StatusTooManyRequests
}

// resolved is Options with its defaults filled and validated.
type resolved struct {
	Options
	cfg       dedup.Config
	methods   []string
	allow     []string // canonical replay headers
	principal func(*http.Request) string
	// webhook: NewWebhook's semantics (see WebhookOptions): no
	// fingerprint, 503 for a key in flight, the handler not cancelled by
	// the sender going away, a replay never 410.
	webhook bool
}

func (o *Options) resolve() (*resolved, error) {
	var r resolved
	if o != nil {
		r.Options = *o
	}
	if r.Config != nil {
		r.cfg = *r.Config
	}
	if r.cfg.Codec != nil {
		return nil, fmt.Errorf("%w: Config.Codec is set; the middleware stores responses with its own", dedup.ErrInvalidConfig)
	}
	r.MaxResponseSize = cmp.Or(r.MaxResponseSize, defaultMaxResponseSize)
	r.MaxRequestSize = cmp.Or(r.MaxRequestSize, defaultMaxRequestSize)
	r.MismatchStatus = cmp.Or(r.MismatchStatus, http.StatusUnprocessableEntity)
	r.InFlightRetryAfter = cmp.Or(r.InFlightRetryAfter, defaultInFlightRetryAfter)
	switch {
	case r.MaxResponseSize < 0:
		return nil, fmt.Errorf("%w: MaxResponseSize is %d; it must be positive", dedup.ErrInvalidConfig, r.MaxResponseSize)
	case r.MaxRequestSize < 0:
		return nil, fmt.Errorf("%w: MaxRequestSize is %d; it must be positive", dedup.ErrInvalidConfig, r.MaxRequestSize)
	case r.MismatchStatus != http.StatusUnprocessableEntity && r.MismatchStatus != http.StatusConflict:
		return nil, fmt.Errorf("%w: MismatchStatus is %d; it must be 422 or 409", dedup.ErrInvalidConfig, r.MismatchStatus)
	case r.Principal == nil && !r.SharedScope:
		return nil, fmt.Errorf("%w: Principal is not set: set it to keep each caller's keys apart, or set SharedScope for a single-tenant service", dedup.ErrInvalidConfig)
	case r.Principal != nil && r.SharedScope:
		return nil, fmt.Errorf("%w: Principal and SharedScope are both set; set one", dedup.ErrInvalidConfig)
	case r.KeySource != nil && r.Verifier != nil:
		return nil, fmt.Errorf("%w: KeySource and Verifier are both set; a Verifier checks server-issued keys, which come in the Idempotency-Key header", dedup.ErrInvalidConfig)
	case r.InFlightRetryAfter < 0:
		return nil, fmt.Errorf("%w: InFlightRetryAfter is %v; it must be positive", dedup.ErrInvalidConfig, r.InFlightRetryAfter)
	case r.cfg.MaxIDLength != 0 && r.cfg.MaxIDLength < minIDLength:
		return nil, fmt.Errorf("%w: Config.MaxIDLength is %d; the middleware needs at least %d (a hashed scope and a %d-byte key)",
			dedup.ErrInvalidConfig, r.cfg.MaxIDLength, minIDLength, maxKeyLength)
	}
	r.cfg.NoWait = true
	r.cfg.MaxIDLength = cmp.Or(r.cfg.MaxIDLength, adapter.DefaultMaxIDLength)
	r.cfg.MaxResultSize = max(r.cfg.MaxResultSize, r.MaxResponseSize+headerRoom)

	r.methods = slices.Clone(defaultMethods)
	if len(r.Methods) > 0 {
		r.methods = nil
		for _, m := range r.Methods {
			if m == "" || strings.ContainsAny(m, " \t\r\n") {
				return nil, fmt.Errorf("%w: method %q", dedup.ErrInvalidConfig, m)
			}
			r.methods = append(r.methods, strings.ToUpper(m))
		}
	}
	r.allow = slices.Clone(defaultReplayHeaders)
	for _, h := range r.ReplayHeaders {
		name := http.CanonicalHeaderKey(strings.TrimSpace(h))
		if name == "" || slices.Contains(neverReplayed, name) {
			return nil, fmt.Errorf("%w: ReplayHeaders: %q must never be replayed", dedup.ErrInvalidConfig, h)
		}
		if !slices.Contains(r.allow, name) {
			r.allow = append(r.allow, name)
		}
	}
	if r.StoreStatus == nil {
		r.StoreStatus = DefaultStoreStatus
	}
	r.principal = r.Principal
	if r.principal == nil {
		r.principal = func(*http.Request) string { return "" }
	}
	return &r, nil
}
