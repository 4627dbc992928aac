// Package rueidisstore is a [store.Store] in Redis through
// [github.com/redis/rueidis], the client that pipelines the commands of
// concurrent callers on one connection by itself (auto-pipelining). It
// keeps the same records as [github.com/dedup-go/dedup/store/redisstore],
// under the same keys, with the same Lua scripts: the two stores, and
// dedupctl, read and complete each other's records, and switching from
// one to the other needs no migration. It needs Redis 7.0 or later (or
// Valkey), for SET with both NX and GET, and depends on the contract
// package store only, not on the receiver.
//
//	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
//	if err != nil { ... }
//	defer client.Close()
//	s, err := rueidisstore.New(ctx, client, &rueidisstore.Options{Prefix: "dedup:"})
//	if err != nil { ... } // Redis unreachable: matches store.ErrUnavailable
//	rcv, err := dedup.NewReceiver(s, key, handler, &dedup.Config{Namespace: "billing"})
//
// It is a module of its own, so that a user of go-redis never pulls
// rueidis, and a user of rueidis builds no go-redis code.
//
// # When to choose it over redisstore
//
// redisstore (go-redis) stays the default. Choose this store when many
// goroutines of a process call the receiver at once (a consumer with 16
// workers, an HTTP server deduplicating requests): go-redis writes and
// reads each command on a connection of its pool, a system call and a
// wake-up each way per command, and at 16 goroutines on two cores that,
// not Redis, was the limit. rueidis writes the commands of every caller
// that are waiting at the same moment in one write and reads their
// replies in one read, on a few shared connections. In the bench module's
// table (three runs on a busy shared 2-core machine) this store handled
// new messages from 16 goroutines 1.40x, 1.49x and 1.53x as fast as
// redisstore in the same runs; one at a time, and in batches of 100
// (HandleBatch), the runs disagreed with each other (from 0.88x to 1.25x,
// and from 0.49x to 1.47x): no difference to count on there.
//
// Choose redisstore when you need what this one leaves out (below), or
// when your service already has a go-redis client and its hooks (tracing,
// metrics).
//
// # What it guarantees
//
// Everything redisstore's package documentation says under "What it
// guarantees", "Cost" and "Keys and versions" holds here: the records
// are those bytes, written by the same commands (a plain SET NX GET
// claims a new key; a script takes over a failed record or an ended
// lease, or grants again the claim of the caller's own token; a script
// completes, releases, extends), so of any number of
// processes delivering a message at once exactly one runs it, a worker
// whose lease was taken over is fenced off by its token
// ([store.ErrLeaseLost]), a completed or failed record is gone at its
// ExpiresAt by the server's clock, and a fingerprint mismatch is
// [store.ErrKeyReused] in every state. Leases are stamped and judged by
// the clocks of the consumers, as redisstore's. The Store passes
// [github.com/dedup-go/dedup/store/storetest] on a single server and on a
// Cluster.
//
// The Store is a [store.BatchStore], a [store.CompleteReporter], a
// [store.Inspector] (Get, Delete, DeleteIf, Scan), a [store.StepStore]
// and [store.Bounded]:
// the interfaces redisstore implements. On a single server (or Sentinel's
// master) a batch's extension is one run of the multi-key script (up to
// 1,000 keys a run), and so is the completion of fewer than 8 keys; from
// 8 keys on, a completion is a transaction on a dedicated connection
// (WATCH, MGET and TIME; then MULTI, a SET of each record written, EXEC),
// which decides on each record as the script does: two round trips
// where the script takes one, and about half the time in Redis, whose
// Lua pays a SET called from the script and the Lua around it for every
// key of a batch's completion. A transaction that
// a change of one of its keys aborts (a takeover, an expiry) writes
// nothing and leaves the batch to the script, as do keys that repeat, an
// absent key and a value this package did not write. On a Cluster, one
// script run per key, pipelined to each node after loading the script on
// every node (rueidis's Lua.ExecMulti: one round trip more than
// redisstore's).
//
// # Step records
//
// The Store is a [store.StepStore], keeping step records as redisstore
// does (its package documentation, "Step records"): a hash at
// [Store.StepsKey], in the record key's Cluster slot by a hash tag the
// store chooses, read and written by the same scripts, so that step
// records saved through either store are the other's. A new message that
// runs no step costs what it did; Extend and Release take the steps key
// too, and keep it alive at least as long as the record; Complete leaves
// it as it is; Get and Scan return the step records, Delete and DeleteIf
// delete them.
//
// # Failures and timeouts
//
// Every error of Redis (a refused connection, a timeout, a key under the
// prefix that another program wrote) is a [*store.OpError], which matches
// [store.ErrUnavailable], so the receiver applies its fail-closed or
// fail-open policy; a cancelled context is reported as the context's
// error. [Options.Timeout] bounds every call whatever its context, so a
// dead Redis never holds a handler longer; rueidis reconnects by itself
// once the server is back. The scripts run by SHA (rueidis's
// [rueidis.NewLuaScript]: EVALSHA, and EVAL when the server lost them).
//
// # What it leaves out
//
//   - MinReplicas (WAIT after each write, so that a failover cannot lose
//     an acknowledged write): redisstore sends the WAIT in the same
//     pipeline as the write, on the connection that carried it. An
//     auto-pipelined client shares its connections among callers, so the
//     WAIT would have to go through a dedicated connection (rueidis's
//     Dedicated), giving up the auto-pipelining this store exists for.
//     Use redisstore with MinReplicas when a failover must not lose a
//     write.
//   - The Cluster slot-map reload on a network error: rueidis refreshes
//     its map itself, on MOVED and ASK and when a connection breaks.
//   - Client-side caching: a record changes under its key, and a
//     duplicate's answer must be Redis's; the store never uses DoCache.
package rueidisstore
