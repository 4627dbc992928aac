// Package redisstore is a [dedup.Store] in Redis, shared by every process
// that consumes a stream: a single server, Sentinel or Cluster, through
// go-redis's [redis.UniversalClient].
//
//	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	store, err := redisstore.New(ctx, client, &redisstore.Options{Prefix: "dedup:"})
//	if err != nil { ... } // Redis unreachable: matches dedup.ErrStoreUnavailable
//	rcv, err := dedup.NewReceiver(store, key, handler, &dedup.Config{Namespace: "billing"})
//
// # What it guarantees
//
// A record is one Redis hash, and every operation is one Lua script on one
// key: the check and the claim are one atomic step on the server, so of any
// number of processes delivering a message at once exactly one runs it,
// and a worker whose lease was taken over is fenced off by its token
// ([dedup.ErrLeaseLost]). Touching one key per script makes it Cluster-safe
// without hash tags. It passes
// [github.com/dedup-go/dedup/store/storetest] on a single server and on a
// Cluster.
//
// Leases and expiry are measured by the server's clock (TIME inside the
// scripts), so the consumers' clocks never matter. The key's Redis TTL
// follows the record's state: its lease plus [Options.AbandonedTTL] while
// processing (so that the attempt count of a crashed worker survives until
// a redelivery takes over), its retention once completed or failed. Nothing
// is left behind: Redis expires every record.
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
// [Store.AcquireBatch] and [Store.CompleteBatch] take one round trip for a
// whole batch: on a single server one script run claims every key (up to
// 1,000 a run, so that one batch never holds the server long); on a
// Cluster, a pipeline of one script per key, one round trip per node.
//
// # Failures and timeouts
//
// Every error of Redis (a refused connection, a timeout, a key of another
// type under the prefix) matches [dedup.ErrStoreUnavailable], so the
// receiver applies its fail-closed or fail-open policy; a cancelled context
// is reported as the context's error. [Options.Timeout] bounds every call,
// go-redis's retries included, so a dead Redis never holds a handler longer.
// Set ContextTimeoutEnabled on the client so the deadline also cuts a read
// already waiting on a silent server.
//
// # Inspection
//
// The Store is a [dedup.Inspector]: Get, Delete, and Scan by prefix, with
// SCAN (never KEYS) on every master of a Cluster. Records live under
// [Options.Prefix] ("dedup:" by default) followed by the receiver's key
// (namespace, colon, id).
package redisstore
