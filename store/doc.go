// Package store is the contract between a dedup.Receiver and the stores that
// keep its records: [Store], the records it keeps, and the optional abilities
// ([Peeker], [BatchStore], [Inspector], [CompleteReporter], [Bounded],
// [InProcess]) a receiver or a wrapping store finds by type assertion.
//
// Handler writers pick a store (store/memstore, store/redisstore,
// store/tieredstore, store/pgstore) and hand it to dedup.NewReceiver; of
// this package they may meet [ClaimFromContext], which gives a handler the
// claim it runs under (its key and attempt), and the errors the receiver
// re-exports (dedup.ErrStoreUnavailable is [ErrUnavailable]). Store authors implement [Store] and run
// github.com/dedup-go/dedup/store/storetest against it. The package imports
// nothing else of this module, so a store depends on the contract only.
//
// # The record
//
// One record per key, moving through three states:
//
//	           Acquire                 Complete(token)
//	(absent) ----------> processing --------------------> completed (result kept for Retention)
//	     ^                 |   |  lease expires: the next Acquire takes over, attempt+1, new token
//	     |  Release(token) |   +--------------------------------------+
//	     +---- failed <----+  (attempts, last error; the next Acquire retries)
//
// # Rules every store keeps
//
// Beyond the state machine, these are the rules [storetest.Run] pins, each
// with its own subtest:
//
//   - Acquire is one atomic step: of many concurrent Acquires of a free key,
//     exactly one claims it.
//   - A lease is held while the store's clock reads before LeaseUntil; at
//     LeaseUntil exactly it has expired, and the next Acquire takes the key
//     over with a new token and the attempt count plus one.
//   - A retried claim recognises its own: an Acquire with a caller's
//     token (AcquireRequest.Token) that finds the key processing under
//     that same token is granted again without another attempt, its lease
//     running from now; any other token still finds the key held. A lost
//     answer to a claim therefore costs one retry, not a lease.
//   - Extend sets LeaseUntil to now + lease, even when that is earlier than
//     the deadline it had.
//   - A completed or failed record is kept while the store's clock reads
//     before ExpiresAt; at ExpiresAt it is gone: Acquire claims the key
//     afresh (attempt 1) and Inspector.Get reports [ErrNotFound]. A bounded
//     store may evict a record earlier, and counts it; a processing record
//     whose lease expired may be forgotten with its attempt count (memstore
//     does at capacity), but a live claim never is.
//   - Fencing: Complete, Release and Extend succeed only with the token of
//     the claim that holds the key; any other token gets [ErrLeaseLost] and
//     changes nothing. After a lease's deadline and before another Acquire
//     takes the key over, a call with the token either succeeds with its
//     full effect (memstore, redisstore) or fails with ErrLeaseLost and has
//     none; it is never partly applied, and once such a call has failed,
//     every later call with that token fails too.
//   - Complete with the token that already completed the record succeeds
//     again and changes nothing (the first result stays): a handler that
//     completed its record inside its own transaction may be completed
//     twice.
//   - A fingerprint mismatch is [ErrKeyReused] whatever the record's state:
//     processing, completed, failed, or processing under an expired lease.
//     It wins over the takeover or retry that an equal fingerprint would
//     get, and claims nothing. The fingerprint kept is the first non-empty
//     one of a claim that acquired the key.
//   - A completed record keeps LastError of the last failed attempt before
//     it, and its attempt count.
//   - Bad input is refused without effect: an empty key is [ErrInvalidKey],
//     a non-positive lease or retention [ErrInvalidConfig], a zero token
//     [ErrLeaseLost]; a cancelled context is returned as the context's error.
//   - Any other failure (an unreachable server) matches [ErrUnavailable]
//     ([*OpError] does), within a bounded time: the receiver's fail-open
//     or fail-closed policy applies to it.
//   - Results are opaque bytes: Complete copies what it is given, and a
//     Record.Result a store returns may be shared and is read-only.
package store
