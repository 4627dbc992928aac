// Package issuedkey mints and verifies server-issued idempotency keys: the
// server hands a client a key before a sensitive operation (submitting an
// order, a payment), bound to the client's principal and to that
// operation, with an expiry, and signed with HMAC-SHA256, so that key
// generation stays under the server's control.
//
//	iss, err := issuedkey.NewIssuer(&issuedkey.Options{
//		Keys: []issuedkey.Key{{ID: "2026-11", Secret: secret}}, // the first key signs; all verify
//	})
//	k, err := iss.Issue("tenant-42", "POST /orders/o-1/pay")
//	err = iss.Verify(k.Key, "tenant-42", "POST /orders/o-1/pay") // nil
//
// Issuing writes nothing anywhere: the key is its own proof. The record of
// a key is created by the middleware that deduplicates on it, on first use.
//
// # What Verify refuses
//
//	ErrNotIssued        malformed, unknown key id, or a signature that does not match (forged)
//	ErrWrongPrincipal   issued to another principal
//	ErrWrongOperation   issued for another operation
//	ErrExpired          past its expiry, and issued here to this principal for this operation
//
// The checks run in that order, so another principal's expired key is
// ErrWrongPrincipal, and ErrExpired says that every other check passed.
// The HTTP middleware (package github.com/dedup-go/dedup/middleware/http)
// answers the first three 400, 403 and 422; for an expired key it still
// replays the record of a request that completed with it, while the store
// keeps that record, and answers 400 otherwise: an expired key never runs
// the handler. The package
// imports nothing but the standard library and dedup's root module (its
// error of invalid options, dedup.ErrInvalidConfig, and clock), so that any
// transport (gRPC interceptors) can verify keys through the [Verifier]
// interface.
//
// # Format
//
// A key reads "v1.<key id>.<base64url>", at most 138 bytes of printable
// ASCII, so it fits an Idempotency-Key header as it is. The encoded part
// holds the expiry (Unix seconds), a random 96-bit nonce (two keys issued
// for the same principal and operation differ), a keyed hash of the
// principal and one of the operation (neither appears in clear), and the
// HMAC-SHA256 of all of it under the named secret. Secrets are at least 32
// bytes; rotate by putting a new key first and keeping the old one until
// the keys it signed have expired.
package issuedkey
