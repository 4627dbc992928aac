package deduphttp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/middleware/http/issuedkey"
	"github.com/dedup-go/dedup/store"
)

// Middleware deduplicates requests by their Idempotency-Key on a
// dedup.Receiver: the first request with a key runs the handler, and its
// response is stored and replayed to every later request with the key.
// It is safe for concurrent use and holds no goroutine.
type Middleware struct {
	rcv *adapter.Receiver[*call, response]
	o   *resolved
	log *slog.Logger
	// inspect reads a record without claiming it, for an expired
	// server-issued key; nil when the store cannot.
	inspect store.Inspector
	// storeTimeout bounds that read.
	storeTimeout time.Duration
}

// New returns a Middleware over s. Options must set Principal, or
// SharedScope for a single-tenant service; invalid Options (a nil opts
// too) are an error matching dedup.ErrInvalidConfig.
func New(s store.Store, opts *Options) (*Middleware, error) {
	o, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	return newMiddleware(s, o)
}

// newMiddleware returns a Middleware over s with resolved options.
func newMiddleware(s store.Store, o *resolved) (*Middleware, error) {
	m := &Middleware{o: o}
	o.cfg.Codec = &codec{allow: o.allow}
	var err error
	rcv, err := dedup.NewReceiver(s, (*call).id, run, &o.cfg)
	if err != nil {
		return nil, err
	}
	m.rcv = adapter.Bind(rcv)
	m.log = m.rcv.Logger()
	m.inspect, _ = s.(store.Inspector)
	lease := m.rcv.Lease()
	m.storeTimeout = min(cmp.Or(o.cfg.StoreTimeout, lease/5), lease/5)
	return m, nil
}

// Wrap returns next behind the middleware: func(http.Handler) http.Handler,
// as net/http, chi and most routers take it.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
}

// Stats returns the counters of the receiver under the middleware.
func (m *Middleware) Stats() dedup.Stats { return m.rcv.Stats() }

// call is one request through the middleware: the receiver's message.
// Calls are pooled with their buffers.
type call struct {
	m      *Middleware
	next   http.Handler
	w      http.ResponseWriter
	r      *http.Request
	key    string
	scoped []byte // the record id, built once
	body   []byte
	off    int // read position of body, as the handler's r.Body
	fp     string
	cap    capture
	ran    bool // the handler was called
	// expired: the key is a server-issued key past its expiry, served only
	// a replay of its completed record; the handler never runs for it.
	expired bool
	pre     []string
}

var calls = sync.Pool{New: func() any { return new(call) }}

// Buffers above this are not kept in the pool.
const maxPooled = 64 << 10

func (c *call) release() {
	body, buf, pre, scoped := c.body[:0], c.cap.buf[:0], c.pre[:0], c.scoped[:0]
	if cap(body) > maxPooled {
		body = nil
	}
	if cap(buf) > maxPooled {
		buf = nil
	}
	*c = call{body: body, cap: capture{buf: buf}, pre: pre, scoped: scoped}
	calls.Put(c)
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if !slices.Contains(m.o.methods, r.Method) {
		next.ServeHTTP(w, r)
		return
	}
	if m.o.KeySource != nil {
		m.serveSource(w, r, next)
		return
	}
	values := r.Header[HeaderKey]
	switch {
	case len(values) == 0 && m.o.RequireKey:
		m.refuse(w, r, next, "", refusal{status: http.StatusBadRequest, code: CodeKeyMissing,
			detail: "this endpoint requires an Idempotency-Key header", err: dedup.ErrNoKey})
		return
	case len(values) == 0:
		next.ServeHTTP(w, r)
		return
	case len(values) > 1:
		m.refuse(w, r, next, "", invalidKey(errKeyMany))
		return
	}
	key, err := parseKey(values[0])
	if err != nil {
		m.refuse(w, r, next, "", invalidKey(err))
		return
	}
	principal := m.o.principal(r)
	expired := false
	if m.o.Verifier != nil {
		var ref *refusal
		if expired, ref = m.verify(r, key, principal); ref != nil {
			m.refuse(w, r, next, "", *ref)
			return
		}
	}

	c := calls.Get().(*call)
	defer c.release()
	c.m, c.next, c.w, c.r, c.key, c.expired = m, next, w, r, key, expired
	// The scope is the principal, and the operation only when the user
	// names one: the method and path are in the fingerprint, so that the
	// key on another endpoint is refused, not run again.
	op := ""
	if m.o.Operation != nil {
		op = m.o.Operation(r)
	}
	c.scoped = appendScopedID(c.scoped[:0], principal, op, key, m.o.cfg.MaxIDLength)
	if !c.readBody() {
		return
	}
	if expired && !m.completedRecord(c) {
		return
	}
	m.handle(c)
}

// serveSource serves a request whose key Options.KeySource reads: from a
// header or the body, which is read first (within MaxRequestSize) so that
// the source, the handler and the fingerprint share one copy.
func (m *Middleware) serveSource(w http.ResponseWriter, r *http.Request, next http.Handler) {
	c := calls.Get().(*call)
	defer c.release()
	c.m, c.next, c.w, c.r = m, next, w, r
	if !c.readBody() {
		return
	}
	key, ref := m.sourceKey(r, c.body)
	if ref != nil {
		m.refuse(w, r, next, "", *ref)
		return
	}
	c.key = key
	op := ""
	if m.o.Operation != nil {
		op = m.o.Operation(r)
	}
	c.scoped = appendScopedID(c.scoped[:0], m.o.principal(r), op, key, m.o.cfg.MaxIDLength)
	m.handle(c)
}

// handle hands the call to the receiver and answers from its outcome. A
// webhook's handler runs on a context that the sender going away does not
// cancel (its values kept): a sender that times out before the handler
// finishes retries, and its retry is answered with the completed response
// instead of running an aborted handler again. The lease still cancels it.
func (m *Middleware) handle(c *call) {
	ctx := c.r.Context()
	if m.o.webhook {
		ctx = context.WithoutCancel(ctx)
	}
	res, err := m.rcv.Handle(ctx, c)
	m.respond(c, res, err)
}

// invalidKey is the refusal of a key that breaks the rules of parseKey.
func invalidKey(err error) refusal {
	return refusal{status: http.StatusBadRequest, code: CodeKeyInvalid, detail: err.Error(),
		err: fmt.Errorf("%w: %w", dedup.ErrInvalidKey, err)}
}

// verify checks a server-issued key, returning the refusal of a key that
// is refused. An expired key (issued here, to this principal, for this
// operation) is not refused yet: expired reports it, and a completed
// record is still replayed for it.
func (m *Middleware) verify(r *http.Request, key, principal string) (expired bool, ref *refusal) {
	err := m.o.Verifier.Verify(key, principal, m.operation(r))
	if err == nil {
		return false, nil
	}
	if errors.Is(err, issuedkey.ErrExpired) {
		return true, nil
	}
	ref = &refusal{status: http.StatusBadRequest, code: CodeKeyNotIssued, detail: "the Idempotency-Key was not issued by this server",
		err: fmt.Errorf("%w: %w", dedup.ErrInvalidKey, err)}
	switch {
	case errors.Is(err, issuedkey.ErrWrongPrincipal):
		ref.status, ref.code, ref.detail = http.StatusForbidden, CodeKeyPrincipal, "the Idempotency-Key was issued to another principal"
	case errors.Is(err, issuedkey.ErrWrongOperation):
		ref.status, ref.code, ref.detail = http.StatusUnprocessableEntity, CodeKeyOperation, "the Idempotency-Key was issued for another operation"
	}
	return false, ref
}

// completedRecord reports whether the request of an expired key may go on
// to the receiver, where only a completed record's replay (or an in-flight
// answer) awaits it; it answers the request otherwise. A store that can
// read a record without claiming it (store.Inspector, as every store of
// this module) is asked first, so that an expired key with no record
// leaves none; for another store the handler guard does the refusing (see
// run).
func (m *Middleware) completedRecord(c *call) bool {
	if m.inspect == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(c.r.Context(), m.storeTimeout)
	defer cancel()
	rec, err := m.inspect.Get(ctx, m.rcv.Namespace()+":"+string(c.scoped))
	switch {
	case errors.Is(err, dedup.ErrNotFound), err == nil && rec.State == store.StateFailed:
		m.refuse(c.w, c.r, c.next, string(c.scoped), expiredKey)
		return false
	case err != nil:
		m.log.WarnContext(c.r.Context(), "deduphttp: the record of an expired key could not be read", slog.String("key", c.key), slog.Any("error", err))
		m.refuse(c.w, c.r, c.next, string(c.scoped), refusal{status: http.StatusServiceUnavailable, code: CodeStoreDown,
			detail: "the idempotency store is unavailable; retry later", retry: m.rcv.StoreRetryDelay(),
			err: fmt.Errorf("%w: %w", dedup.ErrStoreUnavailable, err)})
		return false
	}
	return true
}

// expiredKey is the refusal of an expired server-issued key with no
// completed record.
var expiredKey = refusal{status: http.StatusBadRequest, code: CodeKeyExpired,
	detail: "the Idempotency-Key has expired and no completed request holds it; ask for a new one",
	err:    fmt.Errorf("%w: %w", dedup.ErrInvalidKey, issuedkey.ErrExpired)}

func writeExpired(w http.ResponseWriter) {
	writeProblem(w, expiredKey.status, expiredKey.code, expiredKey.detail, 0)
}

// operation is Options.Operation, or its default.
func (m *Middleware) operation(r *http.Request) string {
	if m.o.Operation != nil {
		return m.o.Operation(r)
	}
	return r.Method + " " + r.URL.EscapedPath()
}

// readBody reads the request body into c.body, for the fingerprint and the
// handler, answering the request when it is too large or unreadable.
func (c *call) readBody() bool {
	r, limit := c.r, c.m.o.MaxRequestSize
	if r.ContentLength > limit {
		c.refuseBody(http.StatusRequestEntityTooLarge, CodeRequestTooLarge,
			fmt.Sprintf("the request body is %d bytes, over the limit of %d", r.ContentLength, limit))
		return false
	}
	if r.Body == nil || r.Body == http.NoBody {
		return true
	}
	if r.ContentLength > 0 && int64(cap(c.body)) <= r.ContentLength {
		// One byte more, so that the read that finds the end needs no
		// growth.
		c.body = make([]byte, 0, r.ContentLength+1)
	}
	for {
		if len(c.body) == cap(c.body) {
			c.body = append(c.body, 0)[:len(c.body)]
		}
		n, err := r.Body.Read(c.body[len(c.body):cap(c.body)])
		c.body = c.body[:len(c.body)+n]
		if int64(len(c.body)) > limit {
			c.refuseBody(http.StatusRequestEntityTooLarge, CodeRequestTooLarge,
				fmt.Sprintf("the request body is over the limit of %d bytes", limit))
			return false
		}
		if err == io.EOF {
			return true
		}
		if err != nil {
			c.refuseBody(http.StatusBadRequest, CodeBodyUnreadable, "reading the request body failed: "+err.Error())
			return false
		}
	}
}

// refuseBody refuses a request for its body: it matches
// dedup.ErrUndecodable, as a broker message whose body cannot be used.
func (c *call) refuseBody(status int, code Code, detail string) {
	c.m.refuse(c.w, c.r, c.next, string(c.scoped), refusal{status: status, code: code, detail: detail,
		err: fmt.Errorf("%w: %s", dedup.ErrUndecodable, detail)})
}

// Read serves the buffered body to the handler as its r.Body.
func (c *call) Read(p []byte) (int, error) {
	if c.off >= len(c.body) {
		return 0, io.EOF
	}
	n := copy(p, c.body[c.off:])
	c.off += n
	return n, nil
}

// Close is a no-op: the body is a buffer.
func (c *call) Close() error { return nil }

// id is the receiver's key func: the scoped record id.
func (c *call) id() (string, error) { return string(c.scoped), nil }

// Fingerprint hashes the method, path, query and body, so that the key
// reused with another request (another endpoint too) is refused.
func (c *call) Fingerprint() (string, error) {
	if c.m.o.webhook {
		// The event id alone decides: a sender may render an event anew
		// for each attempt.
		return "", nil
	}
	if c.fp == "" {
		c.fp = fingerprint(c.r, c.body)
	}
	return c.fp, nil
}

var _ adapter.Fingerprinter = (*call)(nil)

// errReleased is the handler's error for a response that must not be
// stored: its status says so (StoreStatus), or it streamed.
var errReleased = errors.New("deduphttp: response not stored")

// errExpired is the handler's error for an expired server-issued key that
// reached it: the record was not completed, so nothing is replayed and the
// handler does not run.
// It matches issuedkey.ErrExpired.
var errExpired = fmt.Errorf("deduphttp: %w", issuedkey.ErrExpired)

// run is the receiver's handler: it runs the next handler with the
// capture and returns the response to store, or errReleased.
func run(ctx context.Context, c *call) (response, error) {
	if c.expired {
		return response{}, errExpired
	}
	c.ran = true
	h := c.w.Header()
	if _, held := store.ClaimFromContext(ctx); !held {
		// The store is down and the receiver fail-open: no claim.
		h.Set(HeaderBypassed, "true")
	}
	for k := range h {
		c.pre = append(c.pre, k)
	}
	c.cap.reset(c.w, c.m.o.MaxResponseSize)
	r := c.r.WithContext(ctx)
	c.off = 0
	r.Body = c
	c.next.ServeHTTP(&c.cap, r)
	cp := &c.cap
	if cp.streamed {
		return response{}, errReleased
	}
	status := cmpOr(cp.status, http.StatusOK)
	if !c.m.o.StoreStatus(status) {
		return response{}, errReleased
	}
	return response{status: status, notKept: cp.notKept, live: h, body: cp.buf}, nil
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// respond answers the request from the receiver's outcome.
func (m *Middleware) respond(c *call, res dedup.Result[response], err error) {
	w := c.w
	if err == nil {
		switch res.Status {
		case delivery.StatusProcessed, delivery.StatusBypassed:
			if notStored(res.Problem) {
				m.markNotStored(c)
			}
			c.cap.finish()
		case delivery.StatusDuplicate:
			m.replay(w, &res.Value)
		case delivery.StatusInFlight:
			m.inFlight(w, min(max(res.RetryAfter, time.Second), m.o.InFlightRetryAfter), false)
		default:
			writeProblem(w, http.StatusInternalServerError, CodeInternal, "unexpected outcome "+res.Status.String(), 0)
		}
		return
	}
	var (
		pe *dedup.PanicError
		ce *dedup.CompensationError
	)
	switch {
	case errors.As(err, &ce):
		// Before a panic: a compensation's panic is in ce, and it is not
		// the handler's.
		m.compensationFailed(c, res, err, ce)
	case errors.As(err, &pe):
		m.panicked(c, pe)
	case errors.Is(err, errExpired), c.expired && errors.Is(err, dedup.ErrAttemptsExhausted):
		writeExpired(w)
	case errors.Is(err, errReleased), c.ran && (c.cap.status != 0 || c.cap.sent):
		// The handler answered (a status not stored, a stream, or a
		// response cut short by a lost lease or a client gone): the client
		// gets that answer.
		c.cap.finish()
	case errors.Is(err, dedup.ErrKeyReused):
		writeProblem(w, m.o.MismatchStatus, CodeKeyReused, "this "+m.keyName()+" was used with another request (method, path, query or body)", 0)
	case errors.Is(err, dedup.ErrStoreUnavailable):
		writeProblem(w, http.StatusServiceUnavailable, CodeStoreDown, "the idempotency store is unavailable; retry later", m.rcv.StoreRetryDelay())
	case errors.Is(err, dedup.ErrAttemptsExhausted), errors.Is(err, dedup.ErrGivenUp):
		// A key given up (its steps compensated) is one whose requests
		// failed MaxAttempts times: a request has no other way to be.
		m.exhausted(w)
	case errors.Is(err, dedup.ErrLeaseLost):
		m.inFlight(w, m.o.InFlightRetryAfter, true)
	case errors.Is(err, dedup.ErrCanceled):
		// The client is gone, or the server is shutting down.
		writeProblem(w, http.StatusServiceUnavailable, CodeInternal, "the request was cancelled before it was handled", m.o.InFlightRetryAfter)
	default:
		m.log.ErrorContext(c.r.Context(), "deduphttp: unexpected error", slog.String("key", c.key), slog.Any("error", err))
		writeProblem(w, http.StatusInternalServerError, CodeInternal, "the request could not be handled", 0)
	}
}

// exhausted answers a request whose key failed too often: its requests
// failed Config.MaxAttempts times, and the steps they completed were
// compensated (or their compensations failed as often).
func (m *Middleware) exhausted(w http.ResponseWriter) {
	writeProblem(w, http.StatusUnprocessableEntity, CodeAttemptsExhausted, "requests with this "+m.keyName()+" failed too often; use a new key", 0)
}

// compensationFailed answers a request whose key is being given up and
// one of whose compensations failed (ce): the compensations resume on a
// retry with the key, so the client is asked to retry (503 with the
// receiver's backoff as Retry-After), or, once the failure is final, the
// key is refused as exhausted. The handler's own answer, when it ran and
// held its response back, is dropped: the outcome of the key is what the
// client must act on. One that already went out (a stream, a body over
// MaxResponseSize) is finished as it is. The receiver logged the
// compensation's error; the client is told nothing of it.
func (m *Middleware) compensationFailed(c *call, res dedup.Result[response], err error, ce *dedup.CompensationError) {
	if c.ran {
		if c.cap.sent || c.cap.hijacked {
			c.cap.finish()
			return
		}
		h := c.w.Header() // the handler's headers go with its answer
		for k := range h {
			if !slices.Contains(c.pre, k) {
				delete(h, k)
			}
		}
	}
	if ce.Final {
		m.exhausted(c.w)
		return
	}
	retry := max(m.rcv.Decide(res, err).Delay, time.Second)
	writeProblem(c.w, http.StatusServiceUnavailable, CodeGivingUp,
		"requests with this "+m.keyName()+" failed too often, and what they did is being undone; retry with the same "+m.keyName()+" to finish", retry)
}

// inFlight answers a request whose key another request holds (takenOver:
// took over from this one): 409, or 503 for a webhook, with Retry-After.
func (m *Middleware) inFlight(w http.ResponseWriter, retryAfter time.Duration, takenOver bool) {
	status, detail := http.StatusConflict, "a request with this "+m.keyName()+" is being handled; retry later"
	switch {
	case m.o.webhook && takenOver:
		status, detail = http.StatusServiceUnavailable, "another delivery of this event took it over; retry later"
	case m.o.webhook:
		status, detail = http.StatusServiceUnavailable, "a delivery of this event is being handled; retry later"
	case takenOver:
		detail = "another request took this " + m.keyName() + " over; retry later"
	}
	writeProblem(w, status, CodeInFlight, detail, retryAfter)
}

// keyName names the key in a problem's detail: the Idempotency-Key, or
// the key a KeySource reads.
func (m *Middleware) keyName() string {
	if m.o.KeySource != nil {
		return "key"
	}
	return HeaderKey
}

// notStored reports whether a done outcome's Problem means that the
// request's record was not completed: the store failed for as long as the
// lease held, or another request took the key over. A retry with the key
// may then run the handler again (or get the other request's response).
// A result that could not be encoded is not one: the record completed
// without it, and its replays say so (410).
func notStored(problem error) bool {
	return problem != nil && (errors.Is(problem, dedup.ErrLeaseLost) || errors.Is(problem, dedup.ErrStoreUnavailable))
}

// markNotStored says on the response that its outcome was not recorded:
// HeaderNotStored, or the trailer of that name when the response already
// went out (a body over MaxResponseSize), which net/http sends with a
// chunked body or over HTTP/2.
func (m *Middleware) markNotStored(c *call) {
	m.log.WarnContext(c.r.Context(), "deduphttp: the response is answered, but its outcome was not recorded; a retry with the key may run the handler again",
		slog.String("key", c.key))
	h := c.w.Header()
	if c.cap.sent {
		h.Set(http.TrailerPrefix+HeaderNotStored, "true")
		return
	}
	h.Set(HeaderNotStored, "true")
}

// panicked answers a request whose handler panicked; the receiver has
// released the key. A response already partly sent is aborted, so that the
// client does not take it for a complete one; so is a handler's own
// http.ErrAbortHandler.
func (m *Middleware) panicked(c *call, pe *dedup.PanicError) {
	if pe.Value == http.ErrAbortHandler || c.cap.sent {
		panic(http.ErrAbortHandler)
	}
	m.log.ErrorContext(c.r.Context(), "deduphttp: handler panicked; the key is released",
		slog.String("key", c.key), slog.Any("panic", pe.Value), slog.String("stack", string(pe.Stack)))
	h := c.w.Header()
	for k := range h {
		if !slices.Contains(c.pre, k) {
			delete(h, k)
		}
	}
	writeProblem(c.w, http.StatusInternalServerError, CodeHandlerPanic, "the handler failed; the request may be retried with the same "+c.m.keyName(), 0)
}

// replay answers a duplicate with the stored response.
func (m *Middleware) replay(w http.ResponseWriter, r *response) {
	h := w.Header()
	if (r.status == 0 || r.notKept) && m.o.webhook {
		// A sender takes 410 Gone for "stop sending to this endpoint":
		// answer the status the event completed with (a 2xx), bodiless.
		h.Set(HeaderReplayed, "true")
		w.WriteHeader(cmpOr(r.status, http.StatusOK))
		return
	}
	if r.status == 0 || r.notKept {
		// Not kept: too large, or its headers too large for the store.
		if r.status != 0 {
			h.Set(HeaderOriginalStatus, strconv.Itoa(r.status))
		}
		h.Set(HeaderReplayed, "true")
		writeProblem(w, http.StatusGone, CodeNotKept, "the request was handled, but its response was too large to keep for replays", 0)
		return
	}
	for _, f := range r.fields {
		h[f.name] = f.values
	}
	h.Set(HeaderReplayed, "true")
	w.WriteHeader(r.status)
	if len(r.body) > 0 {
		_, _ = w.Write(r.body)
	}
}
