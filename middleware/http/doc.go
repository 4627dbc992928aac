// Package http is dedup's HTTP Idempotency-Key middleware: a retried POST
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
//	bad key: empty, over 255 bytes, control          400 idempotency-key-invalid
//	  characters, bad RFC 8941 quoting, two headers
//	body over MaxRequestSize                         413 request-too-large; the handler does not run
//	first request with the key                       the handler's response, once its outcome is recorded
//	same key, same request, completed                the stored response, with Idempotency-Replayed: true
//	same key, another method/path/query/body         422 idempotency-key-reused (409 with MismatchStatus)
//	same key, in flight (any process, this one too)  409 request-in-flight with Retry-After, at once
//	handler answered 5xx or 429 (StoreStatus)        that answer; the key is released, a retry runs again
//	handler panicked                                 500 handler-panicked; the key is released; the server survives
//	handler flushed or hijacked (streams)            streams as usual; the key is released
//	response body over MaxResponseSize               sent as written; the key completes; replays get
//	                                                 410 response-not-kept with Idempotency-Original-Status
//	key failed Config.MaxAttempts times              422 attempts-exhausted: use a new key
//	store down, fail-closed (the default)            503 idempotency-store-unavailable with Retry-After
//	store down, Config.FailOpen                      the handler runs unprotected: Idempotency-Bypassed: true
//	                                                 on the response, and a warning in the receiver's log
//
// Every refusal is an RFC 9457 problem (application/problem+json, type
// about:blank) whose "code" member says which one it is ([Code]).
//
// # Scope and fingerprint
//
// A record's id is (principal, operation, key): the principal from
// Options.Principal (tenant, user), the operation from Options.Operation
// (by default the method and the path as received). The parts are
// length-prefixed, so no two scopes can meet, whatever their bytes; a scope
// too long for the receiver's MaxIDLength is hashed (SHA-256). One tenant
// is never answered with another's response, and a key reused on another
// endpoint is another record.
//
// The fingerprint stored with the record is the SHA-256 of the method,
// path, query and body. The same key with any other request is refused,
// never answered with the first request's response.
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
// outcome is recorded: a client never receives a response that a retry
// would not be answered with. A body over the cap, a Flush or a Hijack
// stop the holding back and the response goes out as it is written.
//
// # Server-issued keys
//
// With Options.Verifier (an *issuedkey.Issuer), only keys the server
// issued are accepted. [IssueHandler] is the endpoint that issues them,
// bound to the caller's principal and to one operation, with an expiry;
// issuing writes nothing to the store. A key not issued here is 400
// idempotency-key-not-issued, one issued to another principal 403
// idempotency-key-principal, for another operation 422
// idempotency-key-operation, expired 400 idempotency-key-expired.
//
// # Lifecycle
//
// A Middleware has no goroutine and nothing to start or stop; the store
// is the caller's to close. Each request runs the handler under the
// receiver's lease, extended while it runs (Config.Lease, 30s by default):
// a process that dies mid-request leaves a claim that another takes over
// once the lease ends.
package http
