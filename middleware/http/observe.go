package deduphttp

import (
	"fmt"
	"iter"
	"net/http"
	"net/textproto"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
)

// BrokerHTTP is the Origin.Broker of the middleware's events.
const BrokerHTTP = "http"

// RefusedError is the Event.Err of a request the middleware answered
// itself, without handing it to the receiver: no key with RequireKey, a
// bad key, a key the Verifier refused, an expired key with no completed
// record, a body over MaxRequestSize or unreadable, an expired key's
// record that could not be read. Err says what it matches:
// dedup.ErrNoKey, dedup.ErrInvalidKey (with the issuedkey error of a
// Verifier refusal), dedup.ErrUndecodable (the body),
// dedup.ErrStoreUnavailable.
type RefusedError struct {
	// Status is the HTTP status answered; Code the problem's code.
	Status int
	Code   Code
	// Err is why.
	Err error
}

// Error returns the status, the code and why.
func (e *RefusedError) Error() string {
	return fmt.Sprintf("deduphttp: refused with %d %s: %v", e.Status, e.Code, e.Err)
}

// Unwrap returns Err.
func (e *RefusedError) Unwrap() error { return e.Err }

// refusal is a request the middleware answers itself.
type refusal struct {
	status int
	code   Code
	detail string
	retry  time.Duration
	err    error // what the event's RefusedError wraps
}

// refuse answers r with ref's problem, after reporting it to the Observer:
// the one event of a request that never reaches the receiver. key is the
// record id when the key was usable, else empty.
func (m *Middleware) refuse(w http.ResponseWriter, r *http.Request, next http.Handler, key string, ref refusal) {
	if m.o.cfg.Observer != nil {
		err := &RefusedError{Status: ref.status, Code: ref.code, Err: ref.err}
		e := delivery.Event{Origin: origin(r, next), Err: err, Decision: m.rcv.Decide(dedup.Result[response]{}, err)}
		if key != "" {
			e.Key = m.rcv.Namespace() + ":" + key
		}
		m.rcv.Observe(r.Context(), e)
	}
	writeProblem(w, ref.status, ref.code, ref.detail, ref.retry)
}

// Origin is the request's origin, for the receiver's Observer.
func (c *call) Origin() delivery.Origin { return origin(c.r, c.next) }

var _ delivery.Originer = (*call)(nil)

// origin is the Origin of r: Broker "http", Source its route (see
// source), Header its headers but the Idempotency-Key. The key is in the
// event's Key (scoped), never in the Origin.
func origin(r *http.Request, next http.Handler) delivery.Origin {
	return delivery.Origin{Broker: BrokerHTTP, Source: source(r, next), Header: requestHeader(r.Header)}
}

// requestHeader is a request's headers as a delivery.Header, without the
// Idempotency-Key. Names are matched in any case, as HTTP has them.
type requestHeader http.Header

// Get returns the first value of the named header.
func (h requestHeader) Get(name string) (string, bool) {
	k := textproto.CanonicalMIMEHeaderKey(name)
	if k == HeaderKey {
		return "", false
	}
	if v := h[k]; len(v) > 0 {
		return v[0], true
	}
	return "", false
}

// All yields every header but the Idempotency-Key.
func (h requestHeader) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for k, vs := range h {
			if k == HeaderKey {
				continue
			}
			for _, v := range vs {
				if !yield(k, v) {
					return
				}
			}
		}
	}
}

// source names the route of r, a value of few kinds (Source is a metric
// attribute): r.Pattern when a mux routed r before the middleware (it
// wraps a route's handler), else the pattern next routes r to when next
// is an *http.ServeMux (the middleware wraps the mux), else the method
// alone. Never the path: it holds ids.
func source(r *http.Request, next http.Handler) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	if mux, ok := next.(*http.ServeMux); ok {
		if _, p := mux.Handler(r); p != "" {
			return p
		}
	}
	return r.Method
}
