package deduphttp_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dedup-go/dedup"
	deduphttp "github.com/dedup-go/dedup/middleware/http"
	"github.com/dedup-go/dedup/store/memstore"
)

// A Standard Webhooks endpoint (Svix and the senders that follow the
// specification): the signature is checked first, then the delivery is
// deduplicated by its webhook-id. The sender's retry gets the first
// response back, and a forged delivery never reaches the deduplication.
func ExampleNewWebhook() {
	s, err := memstore.New(nil) // redisstore for more than one process
	if err != nil {
		log.Fatal(err)
	}
	dedupe, err := deduphttp.NewWebhook(s, &deduphttp.WebhookOptions{
		Source: deduphttp.StandardWebhookID(),
		Sender: "svix",
		Config: &dedup.Config{Namespace: "webhooks"},
	})
	if err != nil {
		log.Fatal(err)
	}
	var effects atomic.Int32
	handle := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		effects.Add(1) // the event's effect: once per webhook-id
		fmt.Fprintf(w, `{"received":%q}`, r.Header.Get("webhook-id"))
	})
	// The Standard Webhooks test vector was signed at 1614265330.
	now := func() time.Time { return time.Unix(1614265330, 0).Add(10 * time.Second) }
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	endpoint := verifyStandardWebhook(secret, now, dedupe.Wrap(handle)) // verify first, then deduplicate

	deliver := func(what, signature string) {
		r := httptest.NewRequest(http.MethodPost, "/webhooks/svix", strings.NewReader(`{"test": 2432232314}`))
		r.Header.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
		r.Header.Set("webhook-timestamp", "1614265330")
		r.Header.Set("webhook-signature", signature)
		w := httptest.NewRecorder()
		endpoint.ServeHTTP(w, r)
		fmt.Println(what+":", w.Code, w.Header().Get("Idempotency-Replayed"), strings.TrimSpace(w.Body.String()))
	}
	deliver("first", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	deliver("retry", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	deliver("forged", "v1,Zm9yZ2VkIHNpZ25hdHVyZQ==")
	fmt.Println("effects:", effects.Load())
	// Output:
	// first: 200  {"received":"msg_p5jXN8AQM9LWM0D4loKWxJek"}
	// retry: 200 true {"received":"msg_p5jXN8AQM9LWM0D4loKWxJek"}
	// forged: 401  the webhook signature does not match
	// effects: 1
}

// verifyStandardWebhook passes to next only the deliveries signed with the
// endpoint's secret, as the Standard Webhooks specification signs them: a
// v1 signature (one of the space-separated webhook-signature entries) is
// the base64 HMAC-SHA256 of "id.timestamp.body" under the secret's bytes
// (base64 after "whsec_"), and the timestamp is within five minutes of
// now. It reads the body and puts it back for next.
func verifyStandardWebhook(secret string, now func() time.Time, next http.Handler) http.Handler {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		panic("the secret is not whsec_ and base64")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "the body could not be read", http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
		sec, err := strconv.ParseInt(ts, 10, 64)
		if err != nil || now().Sub(time.Unix(sec, 0)).Abs() > 5*time.Minute {
			http.Error(w, "the webhook timestamp is missing or too far from now", http.StatusUnauthorized)
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
		http.Error(w, "the webhook signature does not match", http.StatusUnauthorized)
	})
}

// A GitHub endpoint that several hooks deliver to: X-GitHub-Delivery names
// the event, and two hooks or Apps that receive one event can get the same
// GUID, so the scope is the hook. The X-Hub-Signature-256 (hex HMAC-SHA256 of the body under the
// hook's secret) is checked first.
func ExampleGitHubDelivery() {
	s, err := memstore.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	dedupe, err := deduphttp.NewWebhook(s, &deduphttp.WebhookOptions{
		Source: deduphttp.GitHubDelivery(),
		// The hook whose secret verified the delivery (one secret per hook).
		Principal: func(r *http.Request) string { return "github-hook-" + r.Header.Get("X-GitHub-Hook-ID") },
		Config:    &dedup.Config{Namespace: "webhooks"},
	})
	if err != nil {
		log.Fatal(err)
	}
	secrets := map[string]string{"292430182": "It's a Secret to Everybody", "292430183": "another hook's secret"}
	var runs atomic.Int32
	endpoint := verifyGitHub(secrets, dedupe.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})))

	deliver := func(hook, secret string) {
		body := `{"action":"opened","issue":{"number":1347},"repository":{"full_name":"octocat/Hello-World"}}`
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(body))
		r := httptest.NewRequest(http.MethodPost, "/webhooks/github", strings.NewReader(body))
		r.Header.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
		r.Header.Set("X-GitHub-Event", "issues")
		r.Header.Set("X-GitHub-Hook-ID", hook)
		r.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		w := httptest.NewRecorder()
		endpoint.ServeHTTP(w, r)
		fmt.Println(strings.TrimSpace(fmt.Sprint("hook ", hook, ": ", w.Code, " ", w.Header().Get("Idempotency-Replayed"))))
	}
	deliver("292430182", "It's a Secret to Everybody")
	deliver("292430182", "It's a Secret to Everybody") // a redelivery keeps the GUID
	deliver("292430183", "another hook's secret")      // the same event, another hook
	deliver("292430183", "not the hook's secret")
	fmt.Println("runs:", runs.Load())
	// Output:
	// hook 292430182: 204
	// hook 292430182: 204 true
	// hook 292430183: 204
	// hook 292430183: 401
	// runs: 2
}

// verifyGitHub passes to next only the deliveries whose X-Hub-Signature-256
// is "sha256=" and the hex HMAC-SHA256 of the body under the secret of the
// hook they name.
func verifyGitHub(secrets map[string]string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 25<<20)) // GitHub caps payloads at 25 MB
		if err != nil {
			http.Error(w, "the body could not be read", http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		secret, ok := secrets[r.Header.Get("X-GitHub-Hook-ID")]
		got, err := hex.DecodeString(strings.TrimPrefix(r.Header.Get("X-Hub-Signature-256"), "sha256="))
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(body)
		if !ok || err != nil || !hmac.Equal(got, mac.Sum(nil)) {
			http.Error(w, "the signature does not match", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// A Stripe endpoint reads the event's id from the body, where Stripe puts
// it (verify the Stripe-Signature header first, with Stripe's SDK or as
// ExampleNewWebhook does). A delivery whose id cannot be read is a 400
// problem that says why.
func ExampleStripeEventID() {
	s, err := memstore.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	dedupe, err := deduphttp.NewWebhook(s, &deduphttp.WebhookOptions{
		Source: deduphttp.StripeEventID(),
		Sender: "stripe",
		Config: &dedup.Config{Namespace: "webhooks"},
	})
	if err != nil {
		log.Fatal(err)
	}
	endpoint := dedupe.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"received":true}`)
	}))
	deliver := func(body string) {
		w := httptest.NewRecorder()
		endpoint.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/webhooks/stripe", strings.NewReader(body)))
		fmt.Println(w.Code, w.Header().Get("Idempotency-Replayed"), w.Body.String())
	}
	deliver(`{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","type":"setup_intent.created","pending_webhooks":1}`)
	deliver(`{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","type":"setup_intent.created","pending_webhooks":0}`)
	deliver(`{"object":"event","type":"setup_intent.created"}`)
	deliver(`id=evt_1NG8Du2eZvKYlo2CUI79vXWy`)
	// Output:
	// 200  {"received":true}
	// 200 true {"received":true}
	// 400  {"type":"about:blank","title":"Bad Request","status":400,"detail":"the JSON member \"id\" is missing","code":"idempotency-key-missing"}
	// 400  {"type":"about:blank","title":"Bad Request","status":400,"detail":"the request body is not valid JSON","code":"idempotency-key-invalid"}
}

// KeyFromJSON reads an id nested in the body; KeyFromHeader one in a header
// of the sender's own. Either serves Options.KeySource for requests that
// are not webhooks too.
func ExampleKeyFromJSON() {
	src := deduphttp.KeyFromJSON("event", "id")
	r := httptest.NewRequest(http.MethodPost, "/hooks", nil)
	fmt.Println(src(r, []byte(`{"event":{"id":"ev_42","type":"order.paid"}}`)))
	fmt.Println(src(r, []byte(`{"event":{"id":42}}`)))
	// Output:
	// ev_42 <nil>
	//  the JSON member "event"."id" is a number, not a string
}
