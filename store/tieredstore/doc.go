// Package tieredstore puts an in-process memory tier in front of a remote
// [store.Store] (redisstore, pgstore, your own), so that a duplicate of a
// completed message is answered from memory: no round trip, no allocation
// (after the first duplicate of a record, which makes the record Peek
// shares), about as fast as memstore alone.
//
//	remote, err := redisstore.New(ctx, client, nil)
//	s, err := tieredstore.New(remote, nil)
//	rcv, err := dedup.NewReceiver(s, key, handler, &dedup.Config{Namespace: "billing"})
//
// # What it guarantees
//
// Exactly what the remote store guarantees, across every process that
// shares it: every rule of package store holds through a tiered store
// when it holds for its remote (over a remote store that cannot report
// what a Complete wrote, as long as a token is completed through the
// Store that granted it: see "Which completion is cached"). The local
// tier is only a copy, and it copies only what cannot change:
//
//   - Only completed records are cached, and only the remote's: when
//     Acquire reported a completed record, or after a Complete that this
//     Store knows wrote the record (see "Which completion is cached"). A
//     completed record is immutable until it expires, so its copy cannot
//     go stale.
//   - A copy is the remote's record but for its expiry: result,
//     fingerprint, attempt count, the last failure before the success,
//     the completing token and the creation time (for a record completed
//     here, as the claim's record held them when Acquire granted it, and
//     without a CompletedAt, which the remote stamped by a clock this
//     process does not read: a copy leaves it zero rather than guess).
//     An operator's Get, Scan and DeleteIf read the remote's record.
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
//
// # Which completion is cached
//
// Complete with the token that already completed the record succeeds and
// changes nothing: the remote store keeps the first result and its expiry.
// A result that a Complete carries is therefore cached only when this
// Store knows that the call wrote it.
//
// A remote store that is a [store.CompleteReporter] (redisstore,
// memstore) says so in its answer, in the same round trip: a call that
// it reports [store.CompletionWrote] is cached (when this Store granted
// the claim, and noted it, see Costs), and any other is not, whichever
// Store or process sent the completions, in whatever order. After a call
// that failed (a timeout), the claim stays noted, so that a retry the
// remote store reports it wrote is cached. The Store is a
// store.CompleteReporter itself, passing its remote's answer on
// ([store.CompletionUnknown] over a remote that cannot tell).
//
// Over a remote store that cannot tell (pgstore, your own), its answer is
// the same whether the call wrote the record or found it written, so a
// completion is cached only when:
//
//   - the claim was granted by this Store's Acquire (and noted, see Costs);
//   - the call is the first Complete with its token through this Store,
//     and no other one (a concurrent call, a request of a batch) was sent
//     before it returned, since the remote store may have applied either
//     first;
//   - the remote store accepted it. A call that failed otherwise (a
//     timeout) may still have written its result, so no later Complete
//     with the token caches anything: a retry whose first answer was lost
//     would cache a result, and an expiry, that the remote store does not
//     hold;
//   - the handler did not complete the record in its own transaction (its
//     store.HeldClaim marked completed, found in Complete's context).
//
// Any other accepted Complete caches nothing and leaves the local tier as
// it was; the next duplicate goes to the remote store once and caches its
// record, as a duplicate of a record completed by another process does. A
// copy of a record this Store wrote costs no round trip; reading the
// record back after every Complete would cost one per message, to save
// one on the first duplicate of some.
//
// The one completion such a Store cannot see is another Store's: a token
// that this Store granted, completed first through another Store (another
// process, another tiered store over the same remote) and then through
// this one with another result, is cached here with this Store's result
// and retention, which the remote store does not hold. The receiver never
// hands a token to another Store (a handler that completes its record in
// its own transaction is seen through its context, and the receiver then
// sends no Complete), so this takes a caller of the store that does; such
// a caller should complete a token only through the Store that granted
// it, or use a remote store that reports what a Complete wrote.
//
// Otherwise, the one thing a copy can outlive is an operator's Delete on
// another process (or straight in Redis): that process keeps answering the
// message as a duplicate until its copy expires, at most MaxLocalTTL (5
// minutes by default). Delete through this Store clears its own copy, and
// so does a DeleteIf that did not find the remote record kept (the remote
// store decides). Get and Scan read the remote store.
//
// # Step records
//
// A handler's step records (dedup.Step, [store.StepStore]) are kept by
// the remote store alone, with its record, by its rules: LoadSteps and
// SaveStep go to it (one call each), and the local tier keeps none. Get,
// Scan and DeleteIf answer with the remote's records, step records
// included; Acquire and Peek leave them out, as the contract says.
//
// The Store has the StepStore methods whatever its remote store, but
// keeps step records only when the remote store does: [Store.KeepsSteps]
// says so ([store.StepsKept]), and over a remote store that keeps none
// LoadSteps and SaveStep fail with an error matching
// [store.ErrInvalidConfig] that names it. A receiver whose handler
// records steps asks store.KeepsSteps at construction, so it refuses a
// tiered store over a remote store without step records then, not at the
// first step.
//
// # Costs
//
// The local tier is bounded by Options.Capacity, least recently used out;
// an evicted copy costs one round trip on the next duplicate, never a
// duplicate run. To cache a record it completes, the Store notes each
// claim it holds (bounded by Capacity too); a claim past that bound is
// completed all the same, only not cached, and so is one whose
// completion this Store cannot tell it wrote. Everything else costs what
// the remote store costs.
package tieredstore
