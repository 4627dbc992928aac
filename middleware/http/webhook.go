package deduphttp

import (
	"cmp"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/store"
)

// Defaults of WebhookOptions.
const (
	// defaultWebhookRetention is how long a webhook endpoint keeps the
	// record of an event by default: longer than every documented retry
	// window of the senders with a ready-made source. Stripe retries for up
	// to three days in live mode; the Standard Webhooks specification's
	// example schedule makes its last attempt 75h35m after the first, and
	// Svix's 27h35m after it (each plus the attempts' timeouts); GitHub
	// never redelivers by itself, but lets a person or a script redeliver
	// a delivery of the past 3 days (7 on GitHub Enterprise Server), with
	// the same X-GitHub-Delivery. Seven days covers them all.
	defaultWebhookRetention = 7 * 24 * time.Hour

	// defaultWebhookMaxRequestSize is the largest delivery accepted by
	// default: GitHub's cap on a payload (25 MB). A larger delivery is 413,
	// which GitHub would not retry.
	defaultWebhookMaxRequestSize = 25 << 20

	// defaultWebhookMaxResponseSize is the largest response body kept for
	// the duplicates of an event by default. A record is kept for days and
	// a sender reads the status, not the body: a larger response still
	// completes the event, and its duplicates get its status with no body.
	defaultWebhookMaxResponseSize = 64 << 10
)

// WebhookOptions configures a webhook endpoint's Middleware (see
// NewWebhook). A nil *WebhookOptions means all defaults; but where the
// event id is and whose it is have none (Source, and Sender or
// Principal), so NewWebhook refuses a nil *WebhookOptions, as it refuses
// options without them. Any other zero field takes its default.
type WebhookOptions struct {
	// Source reads a delivery's event id: StandardWebhookID(),
	// GitHubDelivery(), StripeEventID(), KeyFromHeader, KeyFromJSON or a
	// KeySource of yours. A delivery whose id it cannot read is 400.
	// Required.
	Source KeySource

	// Sender names who delivers to the endpoint ("stripe", "github"): the
	// scope of the event ids, which are unique among one sender's events
	// only, and which are never scoped by the end user an event is about.
	// Use one name per endpoint a sender delivers to. Required unless
	// Principal is set; setting both is an error.
	Sender string

	// Principal names the sender of each delivery, for an endpoint that
	// several senders deliver to: one name per GitHub hook or App (GitHub's
	// delivery GUID names the event, and two Apps that receive one event
	// can get the same GUID; the X-GitHub-Hook-ID header tells hooks
	// apart), or per signing secret that verified the delivery. Name what the signature check established,
	// not what an unchecked header claims.
	Principal func(r *http.Request) string

	// Config configures the receiver under the middleware: set Namespace.
	// Retention defaults to 7 days (see the package documentation) and
	// MaxAttempts to no limit, since the sender's retry schedule bounds
	// the attempts and a limit would refuse an event that a fixed handler
	// could now take. Lease (30s) is the time a delivery holds its event
	// while the handler runs, extended while it runs. Config.Codec must not
	// be set, as for New. Defaults to nil: those defaults.
	Config *dedup.Config

	// MaxRequestSize is the largest delivery body accepted, in bytes; a
	// larger one is 413 and the handler does not run. Defaults to 25 MiB,
	// GitHub's cap on a payload.
	MaxRequestSize int64

	// MaxResponseSize is the largest response body kept for an event's
	// duplicates, in bytes. Defaults to 64 KiB.
	MaxResponseSize int

	// ReplayHeaders are response headers stored and replayed beside
	// the ones New always replays, as for New. Defaults to none.
	ReplayHeaders []string

	// InFlightRetryAfter caps the Retry-After of the 503 answered to a
	// delivery whose event is being handled. Below the cap it is the
	// receiver's time to look at the event again, at least 1s: it grows
	// with each look in a row and never passes what remains of the
	// holder's lease, rounded up to whole seconds. Defaults to the
	// receiver's Lease.
	InFlightRetryAfter time.Duration
}

// NewWebhook returns a Middleware for an endpoint that receives webhooks:
// deliveries that a sender (a payment provider, GitHub, a SaaS platform)
// makes at least once and retries on any answer but 2xx, or on a timeout.
// The event id comes from opts.Source, scoped by the sender, and:
//
//   - the first delivery of an event runs the handler, and a 2xx response
//     completes the event: every later delivery of it (a retry, a
//     redelivery) is answered with that response (Idempotency-Replayed:
//     true), so that the sender stops. The id alone decides: a sender may
//     re-render an event between attempts, so the body is not compared.
//   - a delivery whose event is being handled gets 503 request-in-flight
//     with Retry-After. Every sender retries a 5xx (and honours
//     Retry-After where it reads one, as the Standard Webhooks
//     specification asks for a 503), where some take a 4xx for a refusal
//     not worth retrying: a 409 could lose the event. The delivery that
//     holds the event completes it, and the retry is answered with its
//     response.
//   - any other response (a 4xx, a 5xx, a panic, a stream) releases the
//     event: the sender counts it as a failed delivery and retries, and
//     the retry runs the handler again. Answer 2xx to an event you will
//     never handle (an unknown type), so that the sender stops.
//   - the handler keeps running when the sender gives up waiting (GitHub
//     after 10 seconds, Svix after 15): its context is not cancelled by
//     the connection closing, only by a lost lease. It completes the
//     event, and the sender's retry is answered with its response.
//   - a duplicate whose response was too large to keep is answered with
//     its status and no body, never 410 Gone, which a Standard Webhooks
//     sender takes for "disable this endpoint".
//
// Only POST is deduplicated; other methods pass through. Verify the
// delivery's signature before this middleware runs (wrap it), so that a
// forged delivery neither reads the response of a real event nor claims
// its id ahead of it. Invalid options (nil too) are an error matching
// dedup.ErrInvalidConfig.
func NewWebhook(s store.Store, opts *WebhookOptions) (*Middleware, error) {
	o, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	return newMiddleware(s, o)
}

// webhookStoreStatus is the StoreStatus of a webhook endpoint: only a 2xx
// completes an event, since a sender takes any other answer for a failed
// delivery and retries it.
func webhookStoreStatus(status int) bool { return status >= 200 && status < 300 }

func (w *WebhookOptions) resolve() (*resolved, error) {
	var wo WebhookOptions
	if w != nil {
		wo = *w
	}
	switch {
	case wo.Source == nil:
		return nil, fmt.Errorf("%w: WebhookOptions.Source is not set: say where the event id is (StandardWebhookID, GitHubDelivery, StripeEventID, KeyFromHeader, KeyFromJSON)", dedup.ErrInvalidConfig)
	case wo.Sender == "" && wo.Principal == nil:
		return nil, fmt.Errorf("%w: WebhookOptions.Sender is not set: name the sender whose event ids the endpoint receives, or set Principal", dedup.ErrInvalidConfig)
	case wo.Sender != "" && wo.Principal != nil:
		return nil, fmt.Errorf("%w: WebhookOptions.Sender and Principal are both set; set one", dedup.ErrInvalidConfig)
	}
	var cfg dedup.Config
	if wo.Config != nil {
		cfg = *wo.Config
	}
	cfg.Retention = cmp.Or(cfg.Retention, defaultWebhookRetention)
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = math.MaxInt
	}
	principal := wo.Principal
	if principal == nil {
		sender := wo.Sender
		principal = func(*http.Request) string { return sender }
	}
	o := Options{
		Config:             &cfg,
		Methods:            []string{http.MethodPost},
		KeySource:          wo.Source,
		Principal:          principal,
		MaxRequestSize:     cmp.Or(wo.MaxRequestSize, defaultWebhookMaxRequestSize),
		MaxResponseSize:    cmp.Or(wo.MaxResponseSize, defaultWebhookMaxResponseSize),
		ReplayHeaders:      wo.ReplayHeaders,
		StoreStatus:        webhookStoreStatus,
		InFlightRetryAfter: cmp.Or(wo.InFlightRetryAfter, cfg.Lease, (30 * time.Second)),
	}
	r, err := o.resolve()
	if err != nil {
		return nil, err
	}
	r.webhook = true
	return r, nil
}
