package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// A sender plays a webhook provider: it signs each attempt as the
// provider does and retries until it gets a 2xx.
type sender struct {
	name   string
	path   string // the endpoint's path
	client *http.Client
	// sign sets the provider's headers on an attempt to deliver body as
	// event id.
	sign func(r *http.Request, id, body string)
	// maxWait caps the wait before a retry: a real sender waits what
	// Retry-After says or its schedule's next step (seconds, hours); the
	// scenario's senders wait at most this, so that it runs in a second.
	maxWait time.Duration
}

// standardSender signs as the Standard Webhooks specification says (Svix
// and its followers): webhook-id, webhook-timestamp (a new one for each
// attempt) and webhook-signature "v1,<base64 HMAC-SHA256 of
// id.timestamp.body>" under the secret's key.
func standardSender(c *http.Client, secret string, now func() time.Time) *sender {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		panic("the Standard Webhooks secret is not whsec_ and base64")
	}
	return &sender{name: "billing", path: "/webhooks/billing", client: c, maxWait: 20 * time.Millisecond,
		sign: func(r *http.Request, id, body string) {
			ts := strconv.FormatInt(now().Unix(), 10)
			mac := hmac.New(sha256.New, key)
			mac.Write([]byte(id + "." + ts + "." + body))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("webhook-id", id)
			r.Header.Set("webhook-timestamp", ts)
			r.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
		}}
}

// gitHubSender signs as GitHub does: X-GitHub-Delivery (the event's GUID,
// kept by a redelivery), X-GitHub-Event, X-GitHub-Hook-ID, and
// X-Hub-Signature-256 "sha256=<hex HMAC-SHA256 of the body>". GitHub
// itself does not retry a failed delivery: a person or a script
// redelivers it, which is what the retries here stand for.
func gitHubSender(c *http.Client, secret string) *sender {
	return &sender{name: "github", path: "/webhooks/github", client: c, maxWait: 20 * time.Millisecond,
		sign: func(r *http.Request, id, body string) {
			mac := hmac.New(sha256.New, []byte(secret))
			mac.Write([]byte(body))
			r.Header.Set("User-Agent", "GitHub-Hookshot/044aadd")
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("X-GitHub-Delivery", id)
			r.Header.Set("X-GitHub-Event", "issues")
			r.Header.Set("X-GitHub-Hook-ID", "292430182")
			r.Header.Set("X-GitHub-Hook-Installation-Target-ID", "79929171")
			r.Header.Set("X-GitHub-Hook-Installation-Target-Type", "repository")
			r.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		}}
}

// attempt is one delivery attempt as the sender saw it.
type attempt struct {
	Status     int // 0 when the sender got no answer (Err)
	Replayed   bool
	RetryAfter string
	Body       string
	Err        error
}

func (a attempt) ok() bool { return a.Err == nil && a.Status >= 200 && a.Status < 300 }

// String is how the report shows an attempt: "200", "200 (replayed)",
// "503", "gave up".
func (a attempt) String() string {
	switch {
	case a.Err != nil:
		return "gave up"
	case a.Replayed:
		return strconv.Itoa(a.Status) + " (replayed)"
	}
	return strconv.Itoa(a.Status)
}

// try makes one attempt to deliver event id with body to base (a replica);
// sign, when set, replaces the sender's signing (a forged delivery).
func (s *sender) try(ctx context.Context, base, id, body string, sign func(*http.Request, string, string)) attempt {
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, base+s.path, strings.NewReader(body))
	if err != nil {
		return attempt{Err: err}
	}
	if sign == nil {
		sign = s.sign
	}
	sign(r, id, body)
	resp, err := s.client.Do(r)
	if err != nil {
		return attempt{Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return attempt{Status: resp.StatusCode, Replayed: resp.Header.Get("Idempotency-Replayed") == "true",
		RetryAfter: resp.Header.Get("Retry-After"), Body: strings.TrimSpace(string(b)), Err: err}
}

// deliver delivers event id until a 2xx, at most maxAttempts times,
// spreading the attempts over the replicas from the first'th; it returns
// every attempt.
func (s *sender) deliver(ctx context.Context, replicas []string, first int, id, body string) ([]attempt, error) {
	const maxAttempts = 50
	var tries []attempt
	for i := range maxAttempts {
		a := s.try(ctx, replicas[(first+i)%len(replicas)], id, body, nil)
		tries = append(tries, a)
		if a.ok() {
			return tries, nil
		}
		wait := s.maxWait
		if secs, err := strconv.Atoi(a.RetryAfter); err == nil {
			wait = min(time.Duration(secs)*time.Second, s.maxWait)
		}
		select {
		case <-ctx.Done():
			return tries, ctx.Err()
		case <-time.After(wait):
		}
	}
	return tries, fmt.Errorf("%s: event %s not accepted after %d attempts (last: %s %s)", s.name, id, maxAttempts, tries[len(tries)-1], tries[len(tries)-1].Body)
}
