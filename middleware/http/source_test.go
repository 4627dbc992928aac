package deduphttp_test

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	deduphttp "github.com/dedup-go/dedup/middleware/http"
	"github.com/dedup-go/dedup/store"
)

// readSource runs src on r as the middleware does: with the body read.
func readSource(t *testing.T, src deduphttp.KeySource, r *http.Request) (string, error) {
	t.Helper()
	body, err := io.ReadAll(r.Body)
	require.NoError(t, err)
	return src(r, body)
}

// TestSourcesReadTheSendersIDs: each ready-made source reads the event id
// where the sender's documentation puts it, from deliveries shaped as
// that documentation shows them (the signatures are the published test
// vectors, checked here so that the fixtures are the real thing).
func TestSourcesReadTheSendersIDs(t *testing.T) {
	t.Parallel()
	require.Equal(t, swSignature, signStandard(swSecret, swID, swTimestamp, swPayload), "the Standard Webhooks test vector")
	require.Equal(t, ghVectorSig256, signGitHub(ghSecret, ghVectorPayload), "GitHub's test vector")

	for name, tc := range map[string]struct {
		src  deduphttp.KeySource
		r    *http.Request
		want string
	}{
		"Standard Webhooks test vector": {deduphttp.StandardWebhookID(), standardWebhook(swID, swTimestamp, swSignature, swPayload), swID},
		"Standard Webhooks contact.created": {deduphttp.StandardWebhookID(),
			standardWebhook(swContactID, swTimestamp, signStandard(swSecret, swContactID, swTimestamp, swContactPayload), swContactPayload), swContactID},
		"GitHub issues": {deduphttp.GitHubDelivery(), gitHubDelivery(ghDelivery, ghHookID, "issues", ghIssuesOpened, ghSecret), ghDelivery},
		"Stripe event":  {deduphttp.StripeEventID(), stripeDelivery(stripeEvent), stripeEventID},
		"header named X": {deduphttp.KeyFromHeader("x-request-id"), func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, "/", nil)
			r.Header.Set("X-Request-Id", "req-7")
			return r
		}(), "req-7"},
		"JSON path":         {deduphttp.KeyFromJSON("data", "object", "id"), stripeDelivery(stripeEvent), "seti_1NG8Du2eZvKYlo2C9XMqbR0x"},
		"JSON escaped name": {deduphttp.KeyFromJSON("a.b"), stripeDelivery(`{"a.b":"dotted","a":{"b":"nested"}}`), "dotted"},
		"JSON escapes":      {deduphttp.KeyFromJSON("id"), stripeDelivery(`{"id":"evt_\u0031\"q\""}`), `evt_1"q"`},
	} {
		got, err := readSource(t, tc.src, tc.r)
		require.NoError(t, err, name)
		require.Equal(t, tc.want, got, name)
	}
	// The header's name is matched in any case, as HTTP has it: the
	// specification writes webhook-id, net/http canonicalises it.
	require.Equal(t, "Webhook-Id", http.CanonicalHeaderKey("webhook-id"))
}

// TestSourceErrors: what each source refuses, and how the error matches.
func TestSourceErrors(t *testing.T) {
	t.Parallel()
	post := func(body string, header map[string][]string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		for k, v := range header {
			r.Header[k] = v
		}
		return r
	}
	for name, tc := range map[string]struct {
		src    deduphttp.KeySource
		r      *http.Request
		noKey  bool
		detail string
	}{
		"header missing":      {deduphttp.StandardWebhookID(), post(swPayload, nil), true, "the Webhook-Id header is missing"},
		"header empty":        {deduphttp.GitHubDelivery(), post("", map[string][]string{"X-Github-Delivery": {""}}), false, "the X-Github-Delivery header is empty"},
		"header twice":        {deduphttp.StandardWebhookID(), post("", map[string][]string{"Webhook-Id": {"a", "b"}}), false, "the request has more than one Webhook-Id header"},
		"body not JSON":       {deduphttp.StripeEventID(), post("id=evt_1", nil), false, "the request body is not valid JSON"},
		"body empty":          {deduphttp.StripeEventID(), post("", nil), false, "the request body is not valid JSON"},
		"body an array":       {deduphttp.StripeEventID(), post(`[{"id":"evt_1"}]`, nil), false, "the request body is an array, not a JSON object"},
		"id missing":          {deduphttp.StripeEventID(), post(`{"object":"event"}`, nil), true, `the JSON member "id" is missing`},
		"id null":             {deduphttp.StripeEventID(), post(`{"id":null}`, nil), true, `the JSON member "id" is missing`},
		"id a number":         {deduphttp.StripeEventID(), post(`{"id":12}`, nil), false, `the JSON member "id" is a number, not a string`},
		"id an object":        {deduphttp.StripeEventID(), post(`{"id":{"v":"evt_1"}}`, nil), false, `the JSON member "id" is an object, not a string`},
		"id empty":            {deduphttp.StripeEventID(), post(`{"id":""}`, nil), false, `the JSON member "id" is an empty string`},
		"path crosses string": {deduphttp.KeyFromJSON("data", "id"), post(`{"data":"x"}`, nil), false, `the JSON member "data" is a string, not an object`},
		"path missing deep":   {deduphttp.KeyFromJSON("data", "object", "id"), post(`{"data":{}}`, nil), true, `the JSON member "data"."object" is missing`},
		"path a boolean":      {deduphttp.KeyFromJSON("data", "id"), post(`{"data":{"id":true}}`, nil), false, `the JSON member "data"."id" is a boolean, not a string`},
	} {
		_, err := readSource(t, tc.src, tc.r)
		require.Error(t, err, name)
		require.Equal(t, tc.detail, err.Error(), name)
		require.Equal(t, tc.noKey, errors.Is(err, dedup.ErrNoKey), "%s: matches ErrNoKey", name)
		require.Equal(t, !tc.noKey, errors.Is(err, dedup.ErrInvalidKey), "%s: matches ErrInvalidKey", name)
	}
}

// TestSourceBadInput: through the middleware (Options.KeySource and
// NewWebhook), a request whose key cannot be read is a 400 problem that
// says why, whatever the source: the handler does not run, nothing is
// stored, and the Observer hears a RefusedError matching dedup.ErrNoKey or
// dedup.ErrInvalidKey. No request passes through without a key.
func TestSourceBadInput(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s store.Store) {
		for _, mode := range []string{"Options.KeySource", "NewWebhook"} {
			var runs counter
			var rec recorder
			header := deduphttp.KeyFromHeader("X-Event-Id")
			json := deduphttp.KeyFromJSON("data", "id")
			both := func(r *http.Request, body []byte) (string, error) {
				if r.URL.Path == "/json" {
					return json(r, body)
				}
				return header(r, body)
			}
			var h http.Handler
			if mode == "NewWebhook" {
				m, err := deduphttp.NewWebhook(s, &deduphttp.WebhookOptions{Source: both, Sender: "acme", Config: &dedup.Config{Namespace: "orders", Observer: &rec}})
				require.NoError(t, err)
				h = m.Wrap(payHandler(&runs, false, nil))
			} else {
				h = newMiddleware(t, s, &deduphttp.Options{KeySource: both, Config: &dedup.Config{Observer: &rec}}).Wrap(payHandler(&runs, false, nil))
			}
			for name, tc := range map[string]struct {
				path, body string
				header     []string
				code       deduphttp.Code
				detail     string
			}{
				"missing header":    {path: "/header", code: deduphttp.CodeKeyMissing, detail: "the X-Event-Id header is missing"},
				"empty id":          {path: "/header", header: []string{""}, code: deduphttp.CodeKeyInvalid, detail: "the X-Event-Id header is empty"},
				"two headers":       {path: "/header", header: []string{"a", "b"}, code: deduphttp.CodeKeyInvalid, detail: "the request has more than one X-Event-Id header"},
				"huge id":           {path: "/header", header: []string{strings.Repeat("e", 256)}, code: deduphttp.CodeKeyInvalid, detail: "the key read from the request is 256 bytes, over the limit of 255"},
				"control character": {path: "/header", header: []string{"evt\x01"}, code: deduphttp.CodeKeyInvalid, detail: "the key read from the request holds a control character"},
				"non-ASCII":         {path: "/header", header: []string{"caf\u00e9"}, code: deduphttp.CodeKeyInvalid, detail: "the key read from the request holds a byte outside printable ASCII"},
				"body not JSON":     {path: "/json", body: "payload=%7B%7D", code: deduphttp.CodeKeyInvalid, detail: "the request body is not valid JSON"},
				"path missing":      {path: "/json", body: `{"data":{"type":"x"}}`, code: deduphttp.CodeKeyMissing, detail: `the JSON member "data"."id" is missing`},
				"not a string":      {path: "/json", body: `{"data":{"id":42}}`, code: deduphttp.CodeKeyInvalid, detail: `the JSON member "data"."id" is a number, not a string`},
				"huge id in JSON":   {path: "/json", body: `{"data":{"id":"` + strings.Repeat("e", 300) + `"}}`, code: deduphttp.CodeKeyInvalid, detail: "the key read from the request is 300 bytes, over the limit of 255"},
			} {
				raw := map[string][]string{}
				if tc.header != nil {
					raw["X-Event-Id"] = tc.header
				}
				r := record(t, h, req{path: tc.path, tenant: "acme", body: tc.body}, raw)
				require.Equal(t, http.StatusBadRequest, r.Status, "%s %s: %s", mode, name, r.Body)
				p := r.problem(t)
				require.Equal(t, tc.code, p.Code, "%s %s", mode, name)
				require.Equal(t, tc.detail, p.Detail, "%s %s", mode, name)

				e := rec.one(t, name)
				var refused *deduphttp.RefusedError
				require.ErrorAs(t, e.Err, &refused, name)
				require.Equal(t, http.StatusBadRequest, refused.Status)
				require.Equal(t, tc.code, refused.Code)
				if tc.code == deduphttp.CodeKeyMissing {
					require.ErrorIs(t, e.Err, dedup.ErrNoKey, name)
				} else {
					require.ErrorIs(t, e.Err, dedup.ErrInvalidKey, name)
				}
			}
			require.Zero(t, runs.total(), "%s: the handler never ran", mode)
			require.Zero(t, records(t, s), "%s: nothing was stored", mode)

			// The same endpoints take a readable key.
			r := record(t, h, req{path: "/json", tenant: "acme", body: `{"data":{"id":"evt_1"}}`}, nil)
			require.Equal(t, http.StatusCreated, r.Status, "%s: %s", mode, r.Body)
			r = record(t, h, req{path: "/header", tenant: "acme"}, map[string][]string{"X-Event-Id": {"evt_2"}})
			require.Equal(t, http.StatusCreated, r.Status, "%s: %s", mode, r.Body)
			require.Equal(t, 2, runs.total(), mode)
			require.Equal(t, 2, records(t, s), mode)
			rec.mu.Lock()
			rec.events = nil
			rec.mu.Unlock()
			clearRecords(t, s)
		}
	})
}

// clearRecords deletes the records of the namespace "orders".
func clearRecords(t *testing.T, s store.Store) {
	t.Helper()
	in := s.(store.Inspector)
	var keys []string
	for rec, err := range in.Scan(t.Context(), "orders:") {
		require.NoError(t, err)
		keys = append(keys, rec.Key)
	}
	for _, k := range keys {
		require.NoError(t, in.Delete(t.Context(), k))
	}
}

// TestSourceUserError: a source of the user's that returns an error of its
// own is a 400 idempotency-key-invalid with the error's text, and its
// event matches dedup.ErrInvalidKey as well as the user's error; one that
// panics is a 500, logged with its stack, and the server keeps serving.
func TestSourceUserError(t *testing.T) {
	t.Parallel()
	s := newMemstore(t)
	errNotSigned := errors.New("the delivery is not signed")
	var logs bytes.Buffer
	var mu sync.Mutex
	var rec recorder
	var runs counter
	m := newMiddleware(t, s, &deduphttp.Options{
		KeySource: func(r *http.Request, _ []byte) (string, error) {
			switch r.URL.Path {
			case "/panic":
				panic("source bug")
			case "/unsigned":
				return "", errNotSigned
			}
			return "k", nil
		},
		Config: &dedup.Config{Observer: &rec, Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))},
	})
	h := m.Wrap(payHandler(&runs, false, nil))

	r := record(t, h, req{path: "/unsigned", tenant: "acme"}, nil)
	require.Equal(t, http.StatusBadRequest, r.Status)
	p := r.problem(t)
	require.Equal(t, deduphttp.CodeKeyInvalid, p.Code)
	require.Equal(t, "the delivery is not signed", p.Detail)
	e := rec.one(t, "user error")
	require.ErrorIs(t, e.Err, errNotSigned)
	require.ErrorIs(t, e.Err, dedup.ErrInvalidKey)

	r = record(t, h, req{path: "/panic", tenant: "acme"}, nil)
	require.Equal(t, http.StatusInternalServerError, r.Status)
	require.Equal(t, deduphttp.CodeInternal, r.problem(t).Code)
	var pe *dedup.PanicError
	require.ErrorAs(t, rec.one(t, "panic").Err, &pe)
	mu.Lock()
	require.Contains(t, logs.String(), "the key source panicked")
	require.Contains(t, logs.String(), "source bug")
	mu.Unlock()

	require.Equal(t, http.StatusCreated, record(t, h, req{path: "/ok", tenant: "acme"}, nil).Status)
	require.Equal(t, 1, runs.total())
}

// TestSourceWithVerifier: a KeySource and a Verifier together are refused:
// a server-issued key is read from the Idempotency-Key header.
func TestSourceWithVerifier(t *testing.T) {
	t.Parallel()
	_, err := deduphttp.New(newMemstore(t), &deduphttp.Options{
		SharedScope: true, KeySource: deduphttp.GitHubDelivery(), Verifier: verifierFunc(func(string, string, string) error { return nil }),
	})
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)
	require.ErrorContains(t, err, "KeySource and Verifier")
}

type verifierFunc func(key, principal, operation string) error

func (f verifierFunc) Verify(key, principal, operation string) error {
	return f(key, principal, operation)
}
