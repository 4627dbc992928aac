// Package redisstore is a [store.Store] in Redis, shared by every process
// that consumes a stream: a single server, Sentinel or Cluster, through
// go-redis's [redis.UniversalClient]. It depends on the contract package
// store only, not on the receiver.
//
//	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	s, err := redisstore.New(ctx, client, &redisstore.Options{Prefix: "dedup:"})
//	if err != nil { ... } // Redis unreachable: matches store.ErrUnavailable
//	rcv, err := dedup.NewReceiver(s, key, handler, &dedup.Config{Namespace: "billing"})
//
// # What it guarantees
//
// A record is one Redis hash, and every operation is one Lua script on one
// key: the check and the claim are one atomic step on the server, so of any
// number of processes delivering a message at once exactly one runs it,
// and a worker whose lease was taken over is fenced off by its token
// ([store.ErrLeaseLost]). Touching one key per script makes it
// Cluster-safe without hash tags. It passes
// [github.com/dedup-go/dedup/store/storetest] on a single server and on a
// Cluster, and keeps every rule of the contract:
//
//   - A lease has ended once the server's clock reads its LeaseUntil; the
//     next Acquire then takes the key over (attempt plus one, new token).
//     Until that happens, Complete, Release and Extend with the old token
//     still succeed with their full effect.
//   - Extend sets the lease to now plus the given lease, even when that is
//     earlier than the deadline it had.
//   - A completed or failed record is gone at its ExpiresAt: the key's
//     Redis expiry is set to that very millisecond (PEXPIREAT), and since
//     Redis drops a key only once its clock is past it, the scripts and
//     [Store.Get] treat a record whose ExpiresAt has come as absent.
//   - Complete with the token that completed the record (the hash keeps
//     it) succeeds again and changes nothing: the first result stays.
//   - A fingerprint mismatch is [store.ErrKeyReused] in every state,
//     failed and processing under an ended lease included, and claims
//     nothing.
//   - A completed record keeps the LastError of the failed attempt before
//     it, and its attempt count.
//
// Leases and expiry are measured by the server's clock (TIME inside the
// scripts), so the consumers' clocks never matter. The key's Redis expiry
// follows the record's state: its lease deadline plus
// [Options.AbandonedTTL] while processing (so that the attempt count of a
// crashed worker survives until a redelivery takes over), its ExpiresAt
// once completed or failed. Nothing is left behind: Redis expires every
// record.
//
// A record survives what Redis's persistence survives. With appendonly and
// appendfsync always, a record acknowledged to the receiver survives a
// crash of Redis; without persistence a restart forgets every record, and
// duplicates of messages completed before it run again. With replication, a
// failover can lose the last writes that had not reached the replica.
//
// # Round trips
//
// A new message costs two round trips (claim, complete), a duplicate one.
// Put [github.com/dedup-go/dedup/store/tieredstore] in front to answer
// duplicates of completed messages from memory. Scripts are loaded by New
// and run by SHA; a server that lost them (a restart, SCRIPT FLUSH) gets
// them again on the next call.
//
// The Store is a [store.BatchStore]: [Store.AcquireBatch],
// [Store.CompleteBatch] and [Store.ExtendBatch] take one round trip for a
// whole batch. On a single server (or Sentinel's master) one script run
// handles every key in order (up to 1,000 a run, so that one batch never
// holds the server long); on a Cluster, a pipeline of one script per key,
// one round trip per node.
//
// # Failures and timeouts
//
// Every error of Redis (a refused connection, a timeout, a key of another
// type under the prefix) is a [*store.OpError], which matches
// [store.ErrUnavailable], so the receiver applies its fail-closed or
// fail-open policy; a cancelled context is reported as the context's
// error. [Options.Timeout] bounds every call, go-redis's retries included,
// so a dead Redis never holds a handler longer. Set ContextTimeoutEnabled
// on the client so the deadline also cuts a read already waiting on a
// silent server.
//
// # Inspection
//
// The Store is a [store.Inspector]: Get, Delete, and Scan by prefix (an
// iterator), with SCAN (never KEYS) on every master of a Cluster. Records
// live under [Options.Prefix] ("dedup:" by default) followed by the
// receiver's key (namespace, colon, id).
package redisstore
