package deduphttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/dedup-go/dedup"
)

// KeySource reads a request's key from somewhere other than the
// Idempotency-Key header: a webhook's event id, from a header of the
// sender's or a field of the body. body is the request body, read whole
// by the middleware (within MaxRequestSize) before the source is called;
// the handler still gets it as r.Body. A source must not read r.Body, nor
// keep body after it returns.
//
// An error is answered with 400: idempotency-key-missing when it matches
// dedup.ErrNoKey (the request carries no id), idempotency-key-invalid
// otherwise; its text is the problem's detail, so it says what is wrong
// with the request and nothing secret. A key a source returns obeys the
// rules of an Idempotency-Key: 1 to 255 bytes of printable ASCII.
//
// The ready-made sources are [StandardWebhookID], [GitHubDelivery],
// [StripeEventID], [KeyFromHeader] and [KeyFromJSON].
type KeySource func(r *http.Request, body []byte) (string, error)

// Headers that carry the event id of a webhook sender.
const (
	// headerWebhookID is the event id of the Standard Webhooks
	// specification (Svix and the senders that follow it): the same on
	// every retry of a message.
	headerWebhookID = "Webhook-Id"
	// headerGitHubDelivery is GitHub's event id: a GUID that a redelivery
	// keeps.
	headerGitHubDelivery = "X-Github-Delivery"
)

// StandardWebhookID reads the webhook-id header of the Standard Webhooks
// specification, which Svix and the senders that follow it set
// (msg_2KWPBgLlAfxdpx2AI54pPJ85f4W): the specification makes it the id of
// the event, the same however many times a failed delivery is retried,
// and names it the consumer's idempotency key.
func StandardWebhookID() KeySource { return KeyFromHeader(headerWebhookID) }

// GitHubDelivery reads GitHub's X-GitHub-Delivery header, a GUID
// (72d3162e-cc78-11e3-81ab-4c9367dc0958) that a redelivery keeps. GitHub
// documents it as identifying the event, not the delivery, and two GitHub
// Apps that receive one event have been seen to get the same GUID with
// their own payloads: an endpoint that several hooks or Apps deliver to
// scopes its records per hook (see WebhookOptions.Principal and the
// X-GitHub-Hook-ID header).
func GitHubDelivery() KeySource { return KeyFromHeader(headerGitHubDelivery) }

// StripeEventID reads the id member of the Stripe Event object the body
// holds ({"id": "evt_1NG8Du2eZvKYlo2CUI79vXWy", "object": "event", ...}):
// Stripe sends no header with it, and a retry of an event carries the
// same id.
func StripeEventID() KeySource { return KeyFromJSON("id") }

// KeyFromHeader reads the key from the request header name (matched in any
// case). A request without the header has no key (idempotency-key-missing);
// an empty value, or the header sent twice, is invalid.
func KeyFromHeader(name string) KeySource {
	name = http.CanonicalHeaderKey(strings.TrimSpace(name))
	return func(r *http.Request, _ []byte) (string, error) {
		values := r.Header[name]
		switch {
		case len(values) == 0:
			return "", noKey("the " + name + " header is missing")
		case len(values) > 1:
			return "", invalidKeyf("the request has more than one %s header", name)
		case values[0] == "":
			return "", invalidKeyf("the %s header is empty", name)
		}
		return values[0], nil
	}
}

// KeyFromJSON reads the key from the JSON body: the string at the path
// member, nested..., one object member name per element (KeyFromJSON("id")
// reads {"id": "..."}, KeyFromJSON("data", "id") reads {"data": {"id":
// "..."}}). A body that is not a JSON object, a path that crosses a value
// other than an object, and a member that is not a string or is empty are
// invalid; a member that is absent (or null) is a missing key. The body is
// decoded one level of the path at a time.
func KeyFromJSON(member string, nested ...string) KeySource {
	path := append([]string{member}, nested...)
	return func(_ *http.Request, body []byte) (string, error) {
		if !json.Valid(body) {
			return "", invalidKeyf("the request body is not valid JSON")
		}
		raw := json.RawMessage(body)
		for i, name := range path {
			var obj map[string]json.RawMessage
			if raw[0] != '{' || json.Unmarshal(raw, &obj) != nil {
				if i == 0 {
					return "", invalidKeyf("the request body is %s, not a JSON object", jsonKind(raw))
				}
				return "", invalidKeyf("the JSON member %s is %s, not an object", jsonPath(path[:i]), jsonKind(raw))
			}
			v, ok := obj[name]
			if !ok || string(v) == "null" {
				return "", noKey("the JSON member " + jsonPath(path[:i+1]) + " is missing")
			}
			raw = v
		}
		var s string
		if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
			return "", invalidKeyf("the JSON member %s is %s, not a string", jsonPath(path), jsonKind(raw))
		}
		if s == "" {
			return "", invalidKeyf("the JSON member %s is an empty string", jsonPath(path))
		}
		return s, nil
	}
}

// keyError is the error of a source: Error is what the problem's detail
// says, and it matches dedup.ErrNoKey or dedup.ErrInvalidKey.
type keyError struct {
	kind   error
	detail string
}

func (e *keyError) Error() string { return e.detail }
func (e *keyError) Unwrap() error { return e.kind }

func noKey(detail string) error { return &keyError{kind: dedup.ErrNoKey, detail: detail} }

func invalidKeyf(format string, args ...any) error {
	return &keyError{kind: dedup.ErrInvalidKey, detail: fmt.Sprintf(format, args...)}
}

// jsonPath writes a path for an error: its names quoted, joined by dots.
func jsonPath(path []string) string {
	q := make([]string, len(path))
	for i, p := range path {
		q[i] = strconv.Quote(p)
	}
	return strings.Join(q, ".")
}

// jsonKind names the kind of a JSON value that json.Unmarshal accepted
// as a member.
func jsonKind(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "empty"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// sourceKey runs the source and checks the key it returns, returning the
// refusal of a request whose key cannot be used: 400
// idempotency-key-missing for an error matching dedup.ErrNoKey, 400
// idempotency-key-invalid for any other (the event's error matches
// dedup.ErrNoKey or dedup.ErrInvalidKey, whatever the source returned). A
// source that panics is a bug, not a bad request: 500 internal-error, the
// panic logged with its stack.
func (m *Middleware) sourceKey(r *http.Request, body []byte) (key string, ref *refusal) {
	key, err := callSource(m.o.KeySource, r, body)
	var pe *dedup.PanicError
	if errors.As(err, &pe) {
		m.log.ErrorContext(r.Context(), "deduphttp: the key source panicked", slog.Any("panic", pe.Value), slog.String("stack", string(pe.Stack)))
		return "", &refusal{status: http.StatusInternalServerError, code: CodeInternal, detail: "the request's key could not be read", err: err}
	}
	if err == nil {
		err = checkKey(key)
	}
	if err == nil {
		return key, nil
	}
	ref = &refusal{status: http.StatusBadRequest, code: CodeKeyInvalid, detail: err.Error(), err: err}
	switch {
	case errors.Is(err, dedup.ErrNoKey):
		ref.code = CodeKeyMissing
	case !errors.Is(err, dedup.ErrInvalidKey):
		ref.err = fmt.Errorf("%w: %w", dedup.ErrInvalidKey, err)
	}
	return "", ref
}

// callSource calls a user's source, recovering a panic as a
// *dedup.PanicError: one bad request must not take the server down.
func callSource(src KeySource, r *http.Request, body []byte) (key string, err error) {
	defer func() {
		if p := recover(); p != nil {
			key, err = "", &dedup.PanicError{Func: "KeySource", Value: p, Stack: debug.Stack()}
		}
	}()
	return src(r, body)
}

// checkKey applies the rules of an Idempotency-Key to a key a source
// returned: 1 to maxKeyLength bytes of printable ASCII.
func checkKey(key string) error {
	switch {
	case key == "":
		return invalidKeyf("the key read from the request is empty")
	case len(key) > maxKeyLength:
		return invalidKeyf("the key read from the request is %d bytes, over the limit of %d", len(key), maxKeyLength)
	}
	for i := range len(key) {
		switch c := key[i]; {
		case c < 0x20 || c == 0x7f:
			return invalidKeyf("the key read from the request holds a control character")
		case c > 0x7f:
			return invalidKeyf("the key read from the request holds a byte outside printable ASCII")
		}
	}
	return nil
}
