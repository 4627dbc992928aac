package deduphttp

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/dedup-go/dedup/middleware/http/issuedkey"
)

// IssuedKey is the body of IssueHandler's answer.
type IssuedKey struct {
	// Key goes in the Idempotency-Key header of the operation's request.
	Key string `json:"idempotency_key"`
	// Operation is what the key may be used for, as Options.Operation
	// names it.
	Operation string `json:"operation"`
	// ExpiresAt is when the key stops being accepted.
	ExpiresAt time.Time `json:"expires_at"`
}

// IssueHandler returns an endpoint that issues a key to the request's
// principal for the operation that operation names from the request (the
// value Options.Operation will give for the request that uses the key,
// such as "POST /orders/o-1/pay"). It answers 200 with an IssuedKey in
// JSON, not to be cached. principal must be the middleware's
// Options.Principal; nil means the empty principal. Issuing writes nothing
// to the store.
func IssueHandler(iss *issuedkey.Issuer, principal, operation func(r *http.Request) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := ""
		if principal != nil {
			p = principal(r)
		}
		k, err := iss.Issue(p, operation(r))
		if err != nil {
			writeProblem(w, http.StatusInternalServerError, CodeInternal, "no key could be issued", 0)
			return
		}
		body, _ := json.Marshal(IssuedKey{Key: k.Key, Operation: k.Operation, ExpiresAt: k.ExpiresAt.UTC()}) // strings and a time only
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	})
}
