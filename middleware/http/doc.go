// Package deduphttp is dedup's HTTP Idempotency-Key middleware: a retried POST
// (a mobile client on a flaky network, a gateway replaying a call) runs
// the handler once, and every retry gets the first response back, byte for
// byte. It sits on the same dedup.Receiver, stores and key rules as the
// broker adapters, and imports nothing but the standard library and dedup's
// root module. Import it under an alias, next to net/http:
//
//	import (
//		"net/http"
//
//		"github.com/dedup-go/dedup"
//		deduphttp "github.com/dedup-go/dedup/middleware/http"
//	)
//
//	idem, err := deduphttp.New(store, &deduphttp.Options{
//		Config:    &dedup.Config{Namespace: "orders-api"},
//		Principal: func(r *http.Request) string { return tenantOf(r.Context()) },
//	})
//	mux.Handle("POST /orders/{id}/pay", idem.Wrap(pay))   // or router.Use(idem.Wrap)
//
// The package is named http after its folder, as every integration of
// dedup is named after what it integrates; the alias deduphttp keeps it
// apart from net/http.
//
// # What a request gets
//
//	method not in Options.Methods (POST, PATCH)      passes through untouched
//	no Idempotency-Key                               passes through (400 idempotency-key-missing with RequireKey)
//	bad key: empty, over 255 bytes, a byte outside   400 idempotency-key-invalid
//	  printable ASCII, bad RFC 8941 quoting,
//	  two headers
//	body over MaxRequestSize                         413 request-too-large; the handler does not run
//	first request with the key                       the handler's response, once its outcome is recorded
//	  outcome not recorded (store down for the       the handler's response, with Idempotency-Not-Stored: true
//	  whole lease, or the key taken over)
//	same key, same request, completed                the stored response, with Idempotency-Replayed: true
//	same key, another method/path/query/body         422 idempotency-key-reused (409 with MismatchStatus),
//	  (another endpoint too)                         unless Options.Operation tells the two apart
//	same key, in flight (any process, this one too)  409 request-in-flight with Retry-After, at once
//	handler answered 5xx or 429 (StoreStatus)        that answer; the key is released, a retry runs again
//	handler panicked                                 500 handler-panicked; the key is released; the server survives
//	handler flushed or hijacked (streams)            streams as usual; the key is released
//	response body over MaxResponseSize               sent as written; the key completes; replays get
//	                                                 410 response-not-kept with Idempotency-Original-Status
//	key failed Config.MaxAttempts times              422 attempts-exhausted: use a new key (the handler does not run)
//	  (given up: its steps compensated)
//	a compensation failed, key being given up        503 idempotency-key-giving-up with Retry-After: retry
//	                                                 with the same key; 422 attempts-exhausted once final
//	store down, fail-closed (the default)            503 idempotency-store-unavailable with Retry-After
//	store down, Config.FailOpen                      the handler runs unprotected: Idempotency-Bypassed: true
//	                                                 on the response, and a warning in the receiver's log
//
// Every refusal is an RFC 9457 problem (application/problem+json, type
// about:blank) whose "code" member says which one it is ([Code]).
//
// # Keys
//
// A key is 1 to 255 bytes of printable ASCII (0x20 to 0x7E), the
// characters of an RFC 8941 sf-string, which is what the IETF
// Idempotency-Key draft makes the header: sent quoted ("...", with \" and
// \\ escapes) or raw, as most clients send a UUID. A key holding any
// other byte (a control character, DEL, a non-ASCII character in any
// encoding) is refused with 400 idempotency-key-invalid, quoted or raw.
//
// # Scope and fingerprint
//
// A record's id is (principal, operation, key): the principal from
// Options.Principal (tenant, user), the operation from Options.Operation
// when it is set, else empty. The parts are length-prefixed, so no two
// scopes can meet, whatever their bytes; a scope too long for the
// receiver's MaxIDLength is hashed (SHA-256). One tenant is never answered
// with another's response. [RecordID] builds a request's id, and
// dedupctl get and forget find its record from --principal, --operation
// and --idempotency-key.
//
// New refuses Options without a Principal, unless SharedScope is set: then
// every caller's keys are one scope, and a caller that sends another's key
// with the same request gets the other's response. SharedScope is for a
// single-tenant service only.
//
// The fingerprint stored with the record is the SHA-256 of the method,
// path (as received), query and body. The same key with any other request
// is refused (422 idempotency-key-reused), never answered with the first
// request's response: by default that includes the key sent to another
// endpoint (another method or path), as Stripe does. Only an
// Options.Operation of the user's puts the operation in the scope, so that
// one key may serve once per operation.
//
// # What is replayed
//
// The status, the body (up to MaxResponseSize) and an allowlist of headers:
// Content-Type, Content-Encoding, Content-Language, Content-Disposition,
// Location, and Options.ReplayHeaders. Never Set-Cookie, Authorization or
// hop-by-hop headers. A gzip-encoded body is replayed as it was encoded,
// with its Content-Encoding. Trailers are not replayed.
//
// The handler writes to a writer that holds the response back until the
// outcome is recorded. A body over the cap, a Flush or a Hijack stop the
// holding back and the response goes out as it is written.
//
// # When the outcome is not recorded
//
// The rule: a handler's response without Idempotency-Not-Stored is one
// that every retry with the key is answered with (replayed; or 410
// response-not-kept for a body over the cap). A response with
// Idempotency-Not-Stored: true is one whose handler ran (its effect
// happened) but whose completion could not be confirmed in the store: the
// store failed for as long as the request held the key (the receiver
// retries the completion until its lease ends), or the lease ended and
// another request took the key over. A retry with the key may then run
// the handler again, get another request's response, or, when the
// completion reached the store after all, get this response replayed.
// The receiver logs it and counts it in Stats (ResultsNotStored,
// LeaseLost). A response that already went out before its outcome was
// known (a body over MaxResponseSize) gets the flag as an HTTP trailer
// instead, which net/http sends after a chunked HTTP/1.1 body and over
// HTTP/2; a response that went out with a Content-Length cannot carry it. Responses that release the key (5xx, 429, streams, panics)
// never carry it: a retry runs the handler again by design.
//
// # Steps and compensations
//
// A handler may run recorded steps (dedup.Step, with the request's
// context) and the receiver's Config.Compensations undo them when a key
// is given up. A handler cannot fail with a dedup.Permanent error here: it
// answers a response, and a response that releases the key (5xx, 429, a
// stream, a panic) is a failure like any other. So a key is given up when
// its requests failed Config.MaxAttempts times: in the request that hit
// the limit, the compensations of the steps it and the earlier requests
// completed run, in the reverse order of their completion and each once,
// before that request's answer (the handler's own) goes out. A later
// request with the key is 422 attempts-exhausted without the handler
// running, as for any key whose attempts are exhausted; so is one the
// receiver finds given up (dedup.ErrGivenUp).
//
// A compensation that fails (an error, a panic) makes the answer 503
// idempotency-key-giving-up with Retry-After (the receiver's Backoff), in
// place of the handler's: the compensations resume, where they stopped,
// in the client's retry with the same key, which never runs the handler.
// Once the compensations failed Config.MaxAttempts times (the failure is
// final, dedup.CompensationError) the answer is 422 attempts-exhausted,
// naming nothing of what failed; the receiver logs it, and each later
// request with the key tries the compensations again while its record is
// kept. A handler's answer that already went out (a stream, a body over
// MaxResponseSize) is left as it is.
//
// The middleware's message is its own: a compensation takes any as its
// message (dedup.Compensate(func(ctx context.Context, _ any, c Charge)
// error)) and finds what it undoes in the step's recorded result; its
// context holds the request's values. Step results are encoded as JSON
// (dedup.JSONCodec), within Config.MaxResultSize.
//
// # Key sources and webhooks
//
// Options.KeySource reads the key from somewhere other than the
// Idempotency-Key header: a header of the client's own (KeyFromHeader) or
// a string in the JSON body (KeyFromJSON), read after the body (within
// MaxRequestSize), so that the body is read once and still reaches the
// handler. A request whose key cannot be read is a 400 problem whose
// detail says why (idempotency-key-missing for a header or member that is
// absent, idempotency-key-invalid for an empty, oversized or non-ASCII id,
// a body that is not JSON, a member that is not a string): no request
// passes through without a key.
//
// NewWebhook builds the middleware of an endpoint that receives webhooks,
// which senders deliver at least once and retry on any answer but 2xx.
// WebhookOptions.Source says where the event id is: StandardWebhookID
// (the webhook-id header of the Standard Webhooks specification, which
// Svix follows), GitHubDelivery (X-GitHub-Delivery), StripeEventID (the
// Event object's id in the body), or any KeySource. The id is scoped by
// the sender (WebhookOptions.Sender, or Principal for an endpoint several
// senders deliver to), never by the end user an event is about.
//
//	first delivery of an event                   the handler's response; a 2xx completes the event
//	another delivery of it, completed            the first response, Idempotency-Replayed: true (the
//	                                             body is not compared: the id decides)
//	another delivery of it, in flight            503 request-in-flight with Retry-After
//	handler answered anything but a 2xx          that answer; the event is released, and the
//	  (4xx, 5xx, 429, panic, stream)             sender's retry runs the handler again
//	the sender stopped waiting                   the handler runs on: its context is not cancelled by
//	                                             the connection closing; the retry gets its response
//	completed response over MaxResponseSize      duplicates get its status and no body (never 410)
//	no id, or an unusable one                    400 idempotency-key-missing or -invalid
//
// Why 503 and not 409 for an event in flight: every sender retries a 5xx,
// where some take a 4xx for a refusal not worth retrying; the Standard
// Webhooks specification asks senders to heed a 503's Retry-After;
// Stripe and Svix retry any answer but a 2xx on their own schedules, and
// GitHub retries nothing by itself (a person or a script redelivers).
//
// Retention defaults to 7 days, which covers
// the documented retry windows: Stripe retries for up to three days in
// live mode; the Standard Webhooks example schedule's last attempt comes
// 75h35m after the first, Svix's 27h35m after; GitHub lets a delivery of
// the past 3 days be redelivered (7 on GitHub Enterprise Server).
// MaxAttempts defaults to no limit: the sender's schedule bounds the
// attempts.
//
// Signature checks stay the caller's, with the sender's secret and SDK:
// wrap the webhook middleware in the check (verify first, then
// deduplicate), so that a forged delivery neither reads a real event's
// response nor claims its id ahead of the real delivery. The check reads
// the body and puts it back for the middleware.
//
// # Server-issued keys
//
// With Options.Verifier (an *issuedkey.Issuer), only keys the server
// issued are accepted. [IssueHandler] is the endpoint that issues them,
// bound to the caller's principal and to one operation (Options.Operation,
// by default the method and path), with an expiry; issuing writes nothing
// to the store. A key not issued here is 400 idempotency-key-not-issued,
// one issued to another principal 403 idempotency-key-principal, for
// another operation 422 idempotency-key-operation.
//
// An expired key never runs the handler, but its record is still served:
// while the store keeps the record (Config.Retention), a key whose request
// completed is answered with the replay, whatever the key's age, so that
// a client whose response was lost near the expiry is not led to a new key
// and a second effect. A key in flight is 409 as usual. An expired key
// with no completed record (never used, or its requests failed) is 400
// idempotency-key-expired. The middleware reads the record first when the
// store is a store.Inspector (every store of this module is), so such a
// key leaves no record; over another store it claims the key, finds it
// expired and releases it (a failed attempt is recorded). When the record
// cannot be read, the answer is 503 idempotency-store-unavailable, in
// fail-open mode too: an expired key never runs unprotected.
//
// # Observability
//
// Config.Observer hears one delivery.Event per request the middleware
// deduplicates: one that carries an Idempotency-Key, or that RequireKey
// refuses for lacking one; with a KeySource (webhooks too), every request
// of Options.Methods. A method outside Options.Methods, or a request
// without a key that passes through, is no event: dedup had no part in it.
// What happened is in the event:
//
//	handler ran, outcome recorded         Status processed, Stored
//	replayed                              Status duplicate, Stored
//	in flight (409)                       Status in-flight
//	key reused (422)                      Err matches dedup.ErrKeyReused
//	outcome not recorded (Not-Stored)     Status processed, Problem (dedup.ErrLeaseLost,
//	                                      dedup.ErrStoreUnavailable), not Stored
//	5xx, 429, stream, panic               Err: the key was released
//	refused by the middleware itself      Err is a *RefusedError (Status, Code), matching
//	                                      dedup.ErrNoKey (no key), dedup.ErrInvalidKey (a bad
//	                                      key; a key the Verifier refused or an expired one,
//	                                      with the issuedkey error), dedup.ErrUndecodable (the
//	                                      body: 413, unreadable), dedup.ErrStoreUnavailable
//
// The events of requests the receiver answered come from Handle, as for any
// caller of Handle; the middleware's own refusals are reported with
// Receiver.Observe (no StartDelivery: they never reach the receiver). Their
// Decision is what Receiver.Decide answers for the error (Reason no-key,
// invalid-key, undecodable, store-unavailable), as Handle's events carry
// Decide's answer: an HTTP request has no adapter to carry an Action out,
// so read Decision.Reason, a bounded label; Settled is always false.
//
// The Origin: Broker "http"; Source the route, never the path (it holds
// ids, and Source is a metric attribute): r.Pattern when a mux routed the
// request before the middleware (it wraps a route's handler), else the
// pattern the wrapped *http.ServeMux will route it to, else the method
// alone ("POST"); MessageID empty. Header looks the request's headers up
// (traceparent, say), all but the Idempotency-Key: the key is in the
// event's Key (its record id, with the principal), never in the Origin.
//
// The context Observe and the handler get is the request's, as the
// middlewares before this one made it: the server span otelhttp started
// is in it, and the dedupotel Observer annotates that span rather than
// start one of its own. The middleware's log lines go
// through slog's *Context methods with the request's context.
//
// # Lifecycle
//
// A Middleware has no goroutine and nothing to start or stop; the store
// is the caller's to close. Each request runs the handler under the
// receiver's lease, extended while it runs (Config.Lease, 30s by default):
// a process that dies mid-request leaves a claim that another takes over
// once the lease ends.
package deduphttp
