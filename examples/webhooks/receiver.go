package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dedup-go/dedup"
	deduphttp "github.com/dedup-go/dedup/middleware/http"
	"github.com/dedup-go/dedup/store"
)

// Secrets are the endpoint's signing secrets, one per sender.
type Secrets struct {
	// Billing is the Standard Webhooks secret of the billing platform:
	// "whsec_" and the base64 of the key.
	Billing string
	// GitHub is the secret of the GitHub hook.
	GitHub string
}

// receiver is one replica of the service's webhook endpoint. Every
// delivery is verified, then deduplicated, then handled:
//
//	POST /webhooks/billing   Standard Webhooks deliveries of a billing platform (invoice.paid credits an account)
//	POST /webhooks/github    GitHub deliveries of one hook (issues opened are put in a triage queue)
type receiver struct {
	secrets Secrets
	billing *deduphttp.Middleware
	github  *deduphttp.Middleware
	ledger  *ledger
	// hold, when set, is called by the handlers before an event's effect:
	// the scenario holds a delivery there to play a sender that gives up
	// before the handler finishes.
	hold func(ctx context.Context, event string)
	now  func() time.Time
}

// newReceiver returns a replica over s (every replica shares it: Redis),
// whose effects go to l.
func newReceiver(s store.Store, namespace string, secrets Secrets, l *ledger, logger *slog.Logger) (*receiver, error) {
	rc := &receiver{secrets: secrets, ledger: l, now: time.Now}
	cfg := &dedup.Config{Namespace: namespace, Logger: logger}
	var err error
	// Retention defaults to 7 days, which covers the senders' retry
	// windows; MaxAttempts to none, the sender's schedule being the bound.
	rc.billing, err = deduphttp.NewWebhook(s, &deduphttp.WebhookOptions{
		Source: deduphttp.StandardWebhookID(), Sender: "billing", Config: cfg,
	})
	if err != nil {
		return nil, err
	}
	rc.github, err = deduphttp.NewWebhook(s, &deduphttp.WebhookOptions{
		Source: deduphttp.GitHubDelivery(), Sender: "github", Config: cfg,
	})
	return rc, err
}

func (rc *receiver) routes() http.Handler {
	mux := http.NewServeMux()
	// Verify first, then deduplicate: a forged delivery must neither read
	// the response of a real event nor claim its id before the real one.
	mux.Handle("POST /webhooks/billing", rc.verifyStandard(rc.billing.Wrap(http.HandlerFunc(rc.handleBilling))))
	mux.Handle("POST /webhooks/github", rc.verifyGitHub(rc.github.Wrap(http.HandlerFunc(rc.handleGitHub))))
	return mux
}

// maxBody is the largest delivery read: GitHub caps its payloads at 25 MB.
const maxBody = 25 << 20

// readBody reads the body and puts it back for what comes next.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		http.Error(w, "the body could not be read", http.StatusBadRequest)
		return nil, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, true
}

// verifyStandard passes on the deliveries signed as the Standard Webhooks
// specification signs them: one of the space-separated webhook-signature
// entries is "v1," and the base64 HMAC-SHA256, under the secret's key, of
// "webhook-id.webhook-timestamp.body"; the timestamp is within five
// minutes of now, so that a captured delivery cannot be replayed later.
func (rc *receiver) verifyStandard(next http.Handler) http.Handler {
	key, keyErr := base64.StdEncoding.DecodeString(strings.TrimPrefix(rc.secrets.Billing, "whsec_"))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if keyErr != nil {
			http.Error(w, "the endpoint's secret is not whsec_ and base64", http.StatusInternalServerError)
			return
		}
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
		sec, err := strconv.ParseInt(ts, 10, 64)
		if err != nil || rc.now().Sub(time.Unix(sec, 0)).Abs() > 5*time.Minute {
			http.Error(w, "the webhook-timestamp is missing or too far from now", http.StatusUnauthorized)
			return
		}
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id + "." + ts + "."))
		mac.Write(body)
		want := mac.Sum(nil)
		for _, sig := range strings.Fields(r.Header.Get("webhook-signature")) {
			version, b64, _ := strings.Cut(sig, ",")
			got, err := base64.StdEncoding.DecodeString(b64)
			if version == "v1" && err == nil && hmac.Equal(got, want) {
				next.ServeHTTP(w, r)
				return
			}
		}
		http.Error(w, "no webhook-signature matches", http.StatusUnauthorized)
	})
}

// verifyGitHub passes on the deliveries whose X-Hub-Signature-256 is
// "sha256=" and the hex HMAC-SHA256 of the body under the hook's secret.
// GitHub signs no timestamp: the deduplication is what stops a replay.
func (rc *receiver) verifyGitHub(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		got, err := hex.DecodeString(strings.TrimPrefix(r.Header.Get("X-Hub-Signature-256"), "sha256="))
		mac := hmac.New(sha256.New, []byte(rc.secrets.GitHub))
		mac.Write(body)
		if err != nil || !hmac.Equal(got, mac.Sum(nil)) {
			http.Error(w, "the X-Hub-Signature-256 does not match", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// handleBilling handles a billing event: invoice.paid credits the
// account. Any other type is acknowledged and ignored, with a 2xx, so
// that the sender stops sending it.
func (rc *receiver) handleBilling(w http.ResponseWriter, r *http.Request) {
	var ev struct {
		Type string `json:"type"`
		Data struct {
			Invoice string `json:"invoice"`
			Account string `json:"account"`
			Cents   int    `json:"cents"`
		} `json:"data"`
	}
	if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
		// Not a 2xx: the event is released, and the sender's retry runs
		// the handler again (a fixed handler could take it).
		http.Error(w, "the event is not JSON", http.StatusBadRequest)
		return
	}
	id := r.Header.Get("webhook-id")
	if ev.Type != "invoice.paid" {
		writeJSON(w, map[string]string{"event": id, "ignored": ev.Type})
		return
	}
	if !rc.wait(r.Context(), id) {
		http.Error(w, "cancelled", http.StatusServiceUnavailable)
		return
	}
	n := rc.ledger.apply(id, fmt.Sprintf("credited %s with %d cents for %s", ev.Data.Account, ev.Data.Cents, ev.Data.Invoice))
	writeJSON(w, map[string]any{"event": id, "credited": ev.Data.Cents, "effect": n})
}

// handleGitHub handles a GitHub delivery: an issue opened goes to the
// triage queue; a ping, or another event, is acknowledged.
func (rc *receiver) handleGitHub(w http.ResponseWriter, r *http.Request) {
	var ev struct {
		Action string `json:"action"`
		Issue  struct {
			Number int `json:"number"`
		} `json:"issue"`
		Repository struct {
			FullName string `json:"full_name"`
		} `json:"repository"`
	}
	if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
		http.Error(w, "the payload is not JSON", http.StatusBadRequest)
		return
	}
	id := r.Header.Get("X-GitHub-Delivery")
	if r.Header.Get("X-GitHub-Event") != "issues" || ev.Action != "opened" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if !rc.wait(r.Context(), id) {
		http.Error(w, "cancelled", http.StatusServiceUnavailable)
		return
	}
	n := rc.ledger.apply(id, fmt.Sprintf("queued %s#%d for triage", ev.Repository.FullName, ev.Issue.Number))
	writeJSON(w, map[string]any{"delivery": id, "queued": ev.Issue.Number, "effect": n})
}

// wait holds the event while rc.hold says so; it reports false when ctx
// ended first. The webhook middleware does not cancel ctx when the sender
// stops waiting: only a lost lease does.
func (rc *receiver) wait(ctx context.Context, event string) bool {
	if rc.hold != nil {
		rc.hold(ctx, event)
	}
	return ctx.Err() == nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// ledger is where the effects of events go: what the deduplication
// protects. Every replica of the example shares it, as they would share a
// database.
type ledger struct {
	mu      sync.Mutex
	effects map[string][]string // event id -> what was done for it
}

func newLedger() *ledger { return &ledger{effects: map[string][]string{}} }

// apply records an effect of event and returns how many it has had.
func (l *ledger) apply(event, what string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.effects[event] = append(l.effects[event], what)
	return len(l.effects[event])
}

// count returns how many effects event had.
func (l *ledger) count(event string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.effects[event])
}

// events returns the ids that had an effect, sorted.
func (l *ledger) events() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]string, 0, len(l.effects))
	for id := range l.effects {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
