// Package tieredstore puts an in-process memory tier in front of a remote
// [store.Store] (redisstore, pgstore, your own), so that a duplicate of a
// completed message is answered from memory: no round trip, no allocation,
// about as fast as memstore alone.
//
//	remote, err := redisstore.New(ctx, client, nil)
//	s, err := tieredstore.New(remote, nil)
//	rcv, err := dedup.NewReceiver(s, key, handler, &dedup.Config{Namespace: "billing"})
//
// # What it guarantees
//
// Exactly what the remote store guarantees, across every process that
// shares it: every rule of package store holds through a tiered store
// when it holds for its remote. The local tier is only a copy, and it
// copies only what cannot change:
//
//   - Only completed records are cached, and only once the remote store
//     confirmed them: after Complete succeeded, or when Acquire reported a
//     completed record. A completed record is immutable until it expires,
//     so its copy cannot go stale.
//   - A copy is the remote's record but for its expiry: result,
//     fingerprint, attempt count, and the last failure before the success
//     (for a record completed here, as the claim's record held them when
//     Acquire granted it).
//   - Processing and failed records always go to the remote store, so a
//     claim, a takeover after a lease, and a retry are decided by the
//     remote store alone. So are Complete, Release and Extend, and their
//     batches: whether a token holds the key, and whether the token that
//     completed a record may complete it again, is the remote's answer.
//   - A copy never outlives the remote record: one this process completed
//     expires at its retention measured from before the remote call; one
//     learned from the remote store expires Options.ClockSkew before the
//     remote's expiry; neither is kept past Options.MaxLocalTTL. The
//     ExpiresAt of a record answered from memory is the copy's.
//   - A record the handler completed in its own transaction (its
//     store.HeldClaim marked completed, found in Complete's context) is not
//     cached from a second Complete, whose result the remote store did not
//     keep: the next Acquire learns the first one.
//
// The one thing a copy can outlive is an operator's Delete on another
// process (or straight in Redis): that process keeps answering the message
// as a duplicate until its copy expires, at most MaxLocalTTL (5 minutes by
// default). Delete through this Store clears its own copy. Get and Scan
// read the remote store.
//
// # Costs
//
// The local tier is bounded by Options.Capacity, least recently used out;
// an evicted copy costs one round trip on the next duplicate, never a
// duplicate run. To cache a record it completes, the Store notes each
// claim it holds (bounded by Capacity too); a claim past that bound is
// completed all the same, only not cached. Everything else costs what the
// remote store costs.
package tieredstore
