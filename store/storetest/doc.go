// Package storetest is the conformance suite of [store.Store]: every store
// of this module passes it, and a store of your own can too.
//
// # What it pins
//
// Each rule of the contract (the package documentation of store, "Rules
// every store keeps") has its own subtest, grouped by topic:
//
//   - Acquire: one atomic claim among many concurrent Acquires, of a free
//     key, of an expired lease, of a failed record; a refused Acquire
//     counts no attempt and reports the holder's lease.
//   - Lifecycle: completion (the result copied, replayed to duplicates,
//     immutable), takeover of an expired lease (attempt plus one, a new
//     token, the old one fenced off), Extend, Release and attempt
//     counting, LastError kept by the completed record after a failure,
//     retention of completed and failed records.
//   - Deadlines: a lease has expired at its LeaseUntil exactly; Extend
//     sets now + lease even when that is earlier; a completed or failed
//     record is gone at its ExpiresAt exactly (Acquire claims afresh with
//     attempt 1, Get reports [store.ErrNotFound], Peek finds nothing).
//   - Fencing: Complete, Release or Extend with a token after its lease's
//     deadline and before a takeover either has its full effect or fails
//     with [store.ErrLeaseLost] and has none, and then every later call
//     with that token fails too; Complete with the token that completed
//     the record succeeds again and keeps the first result.
//   - Fingerprint: [store.ErrKeyReused] in every state, processing,
//     completed, failed and processing under an expired lease, winning
//     over the retry or takeover an equal fingerprint would get and
//     changing nothing; an empty fingerprint is not checked; the first
//     one is kept.
//   - BadInput: an empty key is [store.ErrInvalidKey], a non-positive
//     lease or retention [store.ErrInvalidConfig], a zero or stale token
//     ErrLeaseLost, a cancelled context the context's error; a refused
//     call changes nothing.
//
// The optional abilities are tested when the store has them and skipped
// otherwise: [store.StepStore] (Steps: a fresh record has no step records;
// they survive Release, a takeover and a claim granted again with its own
// token, and are kept by Complete; they are gone with an expired or
// deleted record; only the holder's token reads or writes them, and a
// refused call changes nothing; Get and Scan return them; bad names are
// [store.ErrInvalidConfig]; concurrent saves are all kept; a 64 KiB value
// is kept), [store.Peeker] (completed, unexpired records only, never
// another key's), [store.BatchStore] (AcquireBatch, CompleteBatch and
// ExtendBatch match the single-key calls request by request, in order;
// empty batches; cancelled contexts) and [store.Inspector] (Get, Delete,
// and Scan as an iterator: only the prefix's records, stopping when the
// loop breaks, a failure yielded once; DeleteIf: every kind of record
// against every kind of request, a claim under a live lease kept and its
// holder still completing, an ended one deleted and its holder fenced
// off, ErrNotFound for no record, and DeleteIf of ended leases racing
// Acquires that take them over never deleting the new claim) and [store.CompleteReporter]
// (CompletionWrote for the completion that wrote the record, exactly one
// of many concurrent ones, CompletionUnchanged for a token completing its
// record again, alone and in a batch; a store answering CompletionUnknown
// skips, as a wrapper over a store that cannot tell does). With an
// Inspector, RecordFields pins what an operator reads of a record's
// history in Get, Scan and DeleteIf: Token is the last claim's (the
// holder's while processing, the settling one after), CreatedAt the first
// claim's time, kept through takeovers, failures and retries, CompletedAt
// zero while processing and the time of the last Complete or Release,
// kept by a Complete again; the batch calls set them as the single ones
// do. A store that does not keep one of them says so in [Harness].Omits,
// and must then answer it zero.
//
// # Running it against your store
//
// Call [Run] from a test of your store's package with a function that
// returns a [Harness]: the store, and how to move and read its clock. A
// store that reads an injected clock takes a
// [github.com/dedup-go/dedup/clock.Fake] and the suite runs in
// milliseconds:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) storetest.Harness {
//			clk := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
//			s := mystore.New(clk)
//			return storetest.Harness{Store: s, Advance: clk.Advance, Now: clk.Now}
//		})
//	}
//
// A store on a server's clock cannot be advanced: its Advance sleeps, a
// small Tick (the suite's time unit, leases are 10 ticks) keeps the sleeps
// short, and Now reads the server's clock:
//
//	storetest.Run(t, func(t *testing.T) storetest.Harness {
//		return storetest.Harness{Store: shared, Advance: time.Sleep, Tick: 20 * time.Millisecond, Now: serverTime}
//	})
//
// # Time checks on a busy machine
//
// No check depends on how fast the machine runs. A LeaseUntil or ExpiresAt
// is checked against Now read before and after the call that set it
// (before + d <= got <= after + d, the before reading truncated to
// Harness.Resolution), and deadlines are passed by advancing at least to
// them, which a sleep that runs long cannot break. A check that a lease or
// record still holds is the one a slow machine can spoil: when it fails
// and Now shows that the store's clock has passed the deadline in
// question, the attempt is inconclusive rather than failed: the subtest
// runs again on a fresh harness with a Tick four times longer, at most
// three times in all, and then skips, or fails when DEDUP_TEST_REQUIRE=1
// is set (what dedup's CI sets), so a conformance check never goes unrun
// quietly there. Without
// Now the suite checks only the order of times and cannot tell, so a
// harness on real time should set it.
//
// # Isolation
//
// Subtests run in parallel and each one calls the harness function itself.
// They isolate by a random key prefix and never flush or scan beyond it, so
// one shared server (and one shared store value) serves them all. What must
// not be shared is a fake clock: one subtest advancing it would expire the
// leases of another.
package storetest
