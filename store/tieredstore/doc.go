// Package tieredstore puts an in-process memstore in front of a remote
// [dedup.Store] (redisstore, pgstore, your own), so that a duplicate of a
// completed message is answered from memory: no round trip, no allocation,
// about as fast as memstore alone.
//
//	remote, err := redisstore.New(ctx, client, nil)
//	store, err := tieredstore.New(remote, nil)
//	rcv, err := dedup.NewReceiver(store, key, handler, &dedup.Config{Namespace: "billing"})
//
// # What it guarantees
//
// Exactly what the remote store guarantees, across every process that
// shares it. The local tier is only a copy, and it copies only what cannot
// change:
//
//   - Only completed records are cached, and only once the remote store
//     confirmed them: after Complete succeeded, or when Acquire reported a
//     completed record. A completed record is immutable until it expires,
//     so its copy cannot go stale.
//   - Processing and failed records always go to the remote store, so a
//     claim, a takeover after a lease, and a retry are decided by the
//     remote store alone.
//   - A copy never outlives the remote record: one this process completed
//     expires at its retention measured from before the remote call; one
//     learned from the remote store expires Options.ClockSkew before the
//     remote's expiry; neither is kept past Options.MaxLocalTTL.
//
// The one thing a copy can outlive is an operator's Delete on another
// process (or straight in Redis): that process keeps answering the message
// as a duplicate until its copy expires, at most MaxLocalTTL (5 minutes by
// default). Delete through this Store clears its own copy.
//
// # Costs
//
// The local tier is bounded by Options.Capacity, least recently used out;
// an evicted copy costs one round trip on the next duplicate, never a
// duplicate run. Everything else costs what the remote store costs.
package tieredstore
