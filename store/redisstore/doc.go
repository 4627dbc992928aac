// Package redisstore is a [store.Store] in Redis, shared by every process
// that consumes a stream: a single server, Sentinel or Cluster, through
// go-redis's [redis.UniversalClient]. It needs Redis 7.0 or later (or
// Valkey), for SET with both NX and GET. It depends on the contract
// package store only, not on the receiver.
//
//	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	s, err := redisstore.New(ctx, client, &redisstore.Options{Prefix: "dedup:"})
//	if err != nil { ... } // Redis unreachable: matches store.ErrUnavailable
//	rcv, err := dedup.NewReceiver(s, key, handler, &dedup.Config{Namespace: "billing"})
//
// # What it guarantees
//
// A record is one Redis string, and every operation is one atomic command
// or one Lua script on one key, so of any number of processes delivering a
// message at once exactly one runs it, and a worker whose lease was taken
// over is fenced off by its token ([store.ErrLeaseLost]). Touching one key
// per command makes it Cluster-safe without hash tags. It passes
// [github.com/dedup-go/dedup/store/storetest] on a single server and on a
// Cluster, and keeps every rule of the contract:
//
//   - A lease has ended once the clock of the process that acquires reads
//     its LeaseUntil; the next Acquire then takes the key over (attempt
//     plus one, new token). Until that happens, Complete, Release and
//     Extend with the old token still succeed with their full effect.
//   - Extend sets the lease to now plus the given lease, even when that is
//     earlier than the deadline it had.
//   - A completed or failed record is gone at its ExpiresAt, by the
//     server's clock, exactly: its key expires the millisecond before, and
//     Redis drops a key once its clock is past the key's expiry.
//   - Complete with the token that completed the record (the record keeps
//     it) succeeds again and changes nothing: the first result stays. The
//     Store is a [store.CompleteReporter]: the completion script answers,
//     in the same round trip, whether the call wrote the record or found
//     it completed already, which lets tieredstore cache exactly the
//     record Redis keeps.
//   - A fingerprint mismatch is [store.ErrKeyReused] in every state,
//     failed and processing under an ended lease included, and claims
//     nothing.
//   - A completed record keeps the LastError of the failed attempt before
//     it, and its attempt count.
//
// A processing record's key lives its lease plus [Options.AbandonedTTL]
// (24h by default), measured by the server, however short the lease: the
// attempt count of a worker that crashed survives until a redelivery takes
// the key over, so a message that kills its worker every time runs out of
// attempts instead of looping. Nothing is left behind: Redis expires every
// record.
//
// A record survives what Redis's persistence survives. With appendonly and
// appendfsync always, a record acknowledged to the receiver survives a
// crash of Redis; without persistence a restart forgets every record, and
// duplicates of messages completed before it run again. With replication, a
// failover can lose the last writes that had not reached the replica.
//
// # Cost, and the trade-offs it takes
//
// A new message costs two round trips and little of Redis's CPU. The
// claim is a plain SET key record NX PX (lease + AbandonedTTL) GET, no
// script: for a new key it writes the processing record; for a taken key
// it writes nothing and answers the record, so a duplicate of a completed
// message, a claim in flight and a reused key cost that one command too.
// Only a failed record or an ended lease goes on to a script, which takes
// the key over if the record it reads then still allows it. The completion
// is one short script (GET, compare the token, SET with PXAT). Measured
// with INFO commandstats on Redis 7.0 (BenchmarkRedisCPU, on a busy shared
// 2-core machine), a new message costs 8 to 12µs of Redis's CPU (the claim
// about 1.3µs, the completion the rest), where the hash record of earlier
// versions, a script for each step, cost 19 to 27µs in the same runs and a
// SET NX followed by a SET 2 to 3µs; in batches of 100, 6 to 7µs a
// message, of which the completion 3.8 to 4.3µs, where with a GET a key
// it took 4.6 to 5.2µs in the same runs (11µs with the hash record). To
// get there:
//
//   - The record is packed in one string (see record.go): the scripts
//     compare and rewrite it by fixed offsets, cuts and joins, and compare
//     times as equal-width digit strings: a completion turns one number
//     into text (its expiry), and the claim of a new key runs no Lua at
//     all.
//   - Leases are stamped by the clock of the process that claims or
//     extends, and a lease's end is judged by the clock of the process that
//     acquires. That is what lets a plain SET claim a key (its record must
//     be complete before Redis sees it) and lets SET NX GET answer a claim
//     in flight with no script. The consumers' clocks must therefore agree
//     to within a small part of the lease: a process whose clock runs ahead
//     by d takes over a lease d early (the holder is fenced off; its
//     handler may still overlap the taker's by d), one that runs behind
//     waits d longer. With NTP (milliseconds) and the receiver's leases
//     (seconds, extended by a heartbeat) neither matters. The key's own
//     life, the lease plus AbandonedTTL, is the server's.
//   - The expiry of a completed or failed record is stamped by the
//     server's clock (TIME, one nested call in the completion script), so
//     that ExpiresAt is the moment Redis drops the record, by Redis's
//     clock, whichever process completed it. That keeps tieredstore's rule
//     as it is: its ClockSkew bounds how far one process's clock may be
//     from Redis's, not from every other consumer's. TIME costs about
//     1.2µs of Redis's CPU per completion (measured: the same script
//     stamping the consumer's clock took 3.4µs at best and 4.1µs median,
//     with TIME 4.8µs and 5.3µs).
//   - Scripts run by SHA (EVALSHA), not as Redis Functions (FCALL).
//     FCALL measured about 0.3µs cheaper per call, but a function library
//     is kept in Redis's data (saved, replicated, never expiring), so every
//     version of this package would leave its library behind in the user's
//     Redis, and loading one needs the FUNCTION permission. The scripts are
//     loaded by New; a server that lost them (a restart, SCRIPT FLUSH)
//     gets them again on the next call, batches included.
//
// On a server with SET ... IFEQ (Redis 8.4, Valkey 8.1), the completion
// could become a plain command too: the record a claim holds is known to
// the process that holds it (it wrote it, or the takeover script answered
// it), and a completed record is that record cut and joined, so
// SET key completed IFEQ processing PX retention would do the script's
// work, if the Store remembered the record of each claim it holds. The
// price is ExpiresAt: no plain command reads the server's clock into a
// value, so the completing process's clock would stamp it, and
// tieredstore's ClockSkew would have to bound the skew between consumers.
// This version runs on Redis 7.0 and keeps the script.
//
// # Keys and versions
//
// A record lives at [Store.RedisKey]: [Options.Prefix] ("dedup:" by
// default), the layout version ":v2:", then the receiver's key (namespace,
// colon, id). Earlier versions of this package kept a hash at Prefix +
// key, which no key of this layout can name (the receiver's key never
// starts with a colon), so neither version ever reads the other's record,
// and a rolling upgrade never answers WRONGTYPE. Neither does it share
// records across the versions: while both run, a message delivered once to
// a process of each may run twice, and the old records expire at their
// retention. An older version's Scan of its whole prefix does meet the new
// records, and fails on them: inspect with this version.
//
// # Batches
//
// The Store is a [store.BatchStore]. [Store.AcquireBatch] sends one
// pipeline of SET NX GET and, only for keys that found a failed record or
// an ended lease, a second round trip of the takeover script.
// [Store.CompleteBatch] and [Store.ExtendBatch] take one round trip for a
// whole batch: on a single server (or Sentinel's master) one script run
// handles every key in order (up to 1,000 a run, so that one batch never
// holds the server long, and reading the server's clock once); on a
// Cluster, a pipeline of one script per key, one round trip per node.
//
// A batch's completion is what costs Redis most, so its script reads every
// key with one MGET, where a GET each cost a nested call a key, and turns
// the expiry into text once per distinct retention; a batch that repeats
// a key (which MGET would read before the first completion of it) runs the
// per-key form instead. The client builds each batch's commands straight
// into go-redis's arguments (keys, records, tokens and results cut from
// one string per batch and passed as *string), so that a batch of 100
// allocates about 390 times, where it did about 2,200, and fewer than the
// two pipelines of plain SET NX and SET that it is measured against.
//
// # Failures and timeouts
//
// Every error of Redis (a refused connection, a timeout, a key under the
// prefix that another program wrote) is a [*store.OpError], which matches
// [store.ErrUnavailable], so the receiver applies its fail-closed or
// fail-open policy; a cancelled context is reported as the context's
// error. [Options.Timeout] bounds every call, go-redis's retries included,
// so a dead Redis never holds a handler longer. Set ContextTimeoutEnabled
// on the client so the deadline also cuts a read already waiting on a
// silent server.
//
// # Inspection
//
// The Store is a [store.Inspector]: Get, Delete, DeleteIf (one script
// that reads the record and deletes it only in the states asked, or a
// claim whose lease ended by this process's clock), and Scan by prefix (an
// iterator), with SCAN (never KEYS) on every master of a Cluster, reading
// each page of records in one pipeline and skipping keys that hold no
// record of this package.
package redisstore
