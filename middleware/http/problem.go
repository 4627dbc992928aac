package deduphttp

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Headers the middleware sets.
const (
	// HeaderKey is the request header that carries the key.
	HeaderKey = "Idempotency-Key"
	// HeaderReplayed is "true" on every replayed response.
	HeaderReplayed = "Idempotency-Replayed"
	// HeaderBypassed is "true" on a response whose handler ran unprotected
	// because the store was down and the receiver is fail-open.
	HeaderBypassed = "Idempotency-Bypassed"
	// HeaderOriginalStatus is, on the 410 replay of a response too large to
	// keep, the status the original response had.
	HeaderOriginalStatus = "Idempotency-Original-Status"
	// HeaderNotStored is "true" on a response whose handler ran but whose
	// outcome could not be recorded: the store failed for as long as the
	// request held the key (its lease), or another request took the key
	// over. A retry with the key may run the handler again, or get
	// another request's response. A response that went out before its
	// outcome was known (a body over MaxResponseSize) carries it as a
	// trailer instead, which net/http sends with a chunked body or over
	// HTTP/2.
	HeaderNotStored = "Idempotency-Not-Stored"
)

// ProblemContentType is the media type of the middleware's error bodies
// (RFC 9457).
const ProblemContentType = "application/problem+json"

// Code is the "code" member of a problem body: a stable, machine-readable
// name for what the middleware refused, beside the HTTP status.
type Code string

// The problems the middleware answers, with their status.
const (
	CodeKeyMissing        Code = "idempotency-key-missing"       // 400: RequireKey and no key; a KeySource found none (dedup.ErrNoKey)
	CodeKeyInvalid        Code = "idempotency-key-invalid"       // 400: empty, too long, not printable ASCII, bad quoting, several headers; any other KeySource error
	CodeKeyNotIssued      Code = "idempotency-key-not-issued"    // 400: not issued by this server (Verifier)
	CodeKeyExpired        Code = "idempotency-key-expired"       // 400: issued, but expired, and no completed request holds it
	CodeKeyPrincipal      Code = "idempotency-key-principal"     // 403: issued to another principal
	CodeKeyOperation      Code = "idempotency-key-operation"     // 422: issued for another operation
	CodeKeyReused         Code = "idempotency-key-reused"        // 422 (or 409, MismatchStatus): the key was used with another request (another endpoint too)
	CodeInFlight          Code = "request-in-flight"             // 409 (503 for a webhook): a request with this key is being handled
	CodeAttemptsExhausted Code = "attempts-exhausted"            // 422: the key failed Config.MaxAttempts times (and was given up: see Steps and compensations in the package documentation)
	CodeGivingUp          Code = "idempotency-key-giving-up"     // 503: the key is being given up and a compensation failed; retry with the same key after Retry-After
	CodeNotKept           Code = "response-not-kept"             // 410: a replay of a response too large to keep
	CodeRequestTooLarge   Code = "request-too-large"             // 413: the body is over MaxRequestSize
	CodeBodyUnreadable    Code = "request-body-unreadable"       // 400: reading the body failed
	CodeStoreDown         Code = "idempotency-store-unavailable" // 503: the store is down (fail-closed)
	CodeHandlerPanic      Code = "handler-panicked"              // 500: the handler panicked; the key was released
	CodeInternal          Code = "internal-error"                // 500: anything else
)

// Problem is an RFC 9457 problem details body, as the middleware writes
// it. Clients may decode error responses into it.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Code says which problem it is (see the Code constants).
	Code Code `json:"code"`
}

// writeProblem answers status with a problem body. retryAfter > 0 adds a Retry-After in whole seconds, rounded up.
func writeProblem(w http.ResponseWriter, status int, code Code, detail string, retryAfter time.Duration) {
	h := w.Header()
	h.Set("Content-Type", ProblemContentType)
	h.Set("Cache-Control", "no-store")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64((retryAfter+time.Second-1)/time.Second), 10))
	}
	body, err := json.Marshal(Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, Code: code})
	if err != nil { // cannot happen: strings and ints only
		body = []byte(`{"type":"about:blank","status":` + strconv.Itoa(status) + `}`)
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
