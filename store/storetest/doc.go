// Package storetest is the conformance suite of [dedup.Store]: every store
// of this module passes it, and a store of your own can too.
//
// The suite pins each rule of the contract with its own subtest: one
// atomic claim among many concurrent Acquires, lease expiry and takeover,
// fencing by token (a taken-over worker gets [dedup.ErrLeaseLost] and
// overwrites nothing), Extend, Release and attempt counting, retention of
// completed and failed records, copying of results, payload fingerprints
// ([dedup.ErrKeyReused] in every state), and the refusal of bad input
// (empty key, non-positive durations, zero or stale token, canceled
// context). The optional abilities [dedup.Peeker], [dedup.BatchStore] and
// [dedup.Inspector] are tested when the store has them and skipped
// otherwise.
//
// # Running it against your store
//
// Call [Run] from a test of your store's package with a function that
// returns a [Harness]: the store, and how to move its clock. A store that
// reads an injected clock takes a
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
// A store on a server's clock cannot be advanced: its Advance sleeps, and
// a small Tick (the suite's time unit, leases are 10 ticks) keeps the
// sleeps short:
//
//	storetest.Run(t, func(t *testing.T) storetest.Harness {
//		return storetest.Harness{Store: shared, Advance: time.Sleep, Tick: 20 * time.Millisecond}
//	})
//
// # Isolation
//
// Subtests run in parallel and each one calls the harness function itself.
// They isolate by a random key prefix and never flush or scan beyond it, so
// one shared server (and one shared store value) serves them all. What must
// not be shared is a fake clock: one subtest advancing it would expire the
// leases of another.
package storetest
