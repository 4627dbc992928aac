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
// or one Lua script on one key (or on a record's key and its steps key,
// which the store puts in the same Cluster slot: "Step records" below),
// so of any number of processes delivering a message at once exactly one
// runs it, and a worker whose lease was taken over is fenced off by its
// token ([store.ErrLeaseLost]). Touching one key per command, or one slot,
// makes it Cluster-safe without hash tags in your keys. It passes
// [github.com/dedup-go/dedup/store/storetest] on a single server and on a
// Cluster, and keeps every rule of the contract:
//
//   - A lease has ended once the clock of the process that acquires reads
//     its LeaseUntil; the next Acquire then takes the key over (attempt
//     plus one, new token). Until that happens, Complete, Release and
//     Extend with the old token still succeed with their full effect.
//   - An Acquire with the caller's own token ([store.AcquireRequest].Token)
//     that finds the key processing under that token, its lease live or
//     ended, is granted the same claim again: the same attempt count, the
//     lease running from now. A claim whose answer was lost (a timeout, a
//     reset connection, a failover) costs its retry one more round trip,
//     not a lease.
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
// failover can lose the last writes that had not reached the replica,
// unless [Options.MinReplicas] waits for them: see "Replication and
// failover".
//
// # Cost, and the trade-offs it takes
//
// A new message costs two round trips and little of Redis's CPU. The
// claim is a plain SET key record NX PX (lease + AbandonedTTL) GET, no
// script: for a new key it writes the processing record; for a taken key
// it writes nothing and answers the record, so a duplicate of a completed
// message, a claim in flight and a reused key cost that one command too.
// Only a failed record, an ended lease or the caller's own claim asked
// for again goes on to a script, which takes the key over (or grants the
// caller's claim again) if the record it reads then still allows it. The completion
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
//   - The record is packed in one string (see record.go in
//     store/internal/rediscore, which rueidisstore shares): the scripts
//     compare and rewrite it by fixed offsets, cuts and joins, with times
//     in 6 bytes that Lua decodes and encodes by arithmetic on their
//     bytes: a completion encodes one time (its expiry) and writes one
//     number (when it completed, after the record's creation), and the
//     claim of a new key runs no Lua at all. A first attempt with no
//     fingerprint, what almost every message leaves behind, takes a
//     short form: 29 bytes while processing, 32 plus the result once
//     completed, which Redis keeps in one allocation (embstr) for a result
//     of up to 12 bytes. With a key of 31 to 44 bytes (a bare SET of a
//     short value: 104 bytes of MEMORY USAGE), a completed record costs
//     136 bytes for such a result (TestRecordSize).
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
// default), the layout version ":v3:", then the receiver's key (namespace,
// colon, id). The record keeps the token of its last claim, when it was
// created (the first claim, on the clock of leases) and when it completed
// or failed (on the server's clock), for an operator's [Store.Get].
//
// Each layout lives under its own Redis keys, so no version ever reads
// another's record, and a rolling upgrade never answers WRONGTYPE; but
// neither does it share records across versions. Version 3 (this one)
// added the creation and completion times to version 2's record, under
// ":v3:" where version 2's were under ":v2:"; version 1 kept a hash at
// Prefix + key, which no later key can name (the receiver's key never
// starts with a colon). While processes of two versions run side by side,
// a message delivered once to a process of each may run twice, a key
// failed under one version starts its attempts again under the other, and
// each version's Get, Scan and DeleteIf see only its own records; the old
// records expire at their retention (processing ones at their lease plus
// AbandonedTTL). Stop the old processes within a retention of starting
// the new ones, or drain the stream first, when a duplicate in that window
// matters. Version 1's Scan of its whole prefix does meet later records,
// and fails on them: inspect with the newest version.
//
// # Step records
//
// The Store is a [store.StepStore]: the receiver records there the
// outcome of each named step of a handler. A message's step records are
// one Redis hash at [Store.StepsKey], beside its record, which stays the
// string above: a new message that runs no step costs exactly what it did
// (the same commands, keys and arguments for Acquire, Complete and their
// batches). The steps key is the record's key after a hash tag chosen for
// its Cluster slot, then ":steps" ("{4Q3}dedup::v3:billing:42:steps"), so
// that a script reads and writes both keys atomically on a Cluster,
// whatever hash tags your keys hold or lack; it starts with "{", never
// with the prefix, so a SCAN of the prefix does not list it. The hash has
// a field per step (its name, its value as the receiver encoded it) and
// one field named "" (no step name is empty) holding the record's
// creation time and the retention SaveStep was given. [Store.SaveStep]
// and [Store.LoadSteps] are scripts that check, with the same atomicity,
// that the token holds the key processing (else [store.ErrLeaseLost],
// nothing written).
//
// The step records live and die with the record. SaveStep, LoadSteps,
// Extend and Release keep the steps key alive at least until the record's
// expiry plus that retention, never shortening it: they survive a
// Release, a takeover of the failed key or of an ended lease, a claim
// granted again to its own token, and Complete. Complete, the hot path,
// leaves the steps key's expiry as it is, so the steps of a completed
// record live at least until the record's expiry as the last of those
// calls left it plus the retention: as long as the completed record when
// Complete's retention is SaveStep's and no takeover came after the last
// of them (a takeover's holder that completes without reading, writing or
// extending its claim may leave the steps of its record to expire before
// the record; only an operator's [Store.Get] would miss them). A steps key
// may outlive its record; it is never read then: the key's next record
// has another creation time, so LoadSteps, Get and Scan ignore that hash,
// Extend and Release do not keep it, and the first SaveStep replaces it.
// (Two records of one key created in the same millisecond, by clocks
// that disagree, would share it: a record created after the previous one
// expired, a retention later, is not.) [Store.Delete] and
// [Store.DeleteIf] delete both keys; Get and Scan read the hash with the
// record, in the same pipeline (on a Cluster, the same node).
//
// With [Options.MinReplicas], SaveStep waits for its replicas as the
// other writes do. Extend and Release of a key without step records cost
// Redis one HGET more than they did; ExtendBatch's keys are the records'
// and their steps keys.
//
// # Batches
//
// The Store is a [store.BatchStore]. [Store.AcquireBatch] sends one
// pipeline of SET NX GET and, only for keys that found a failed record,
// an ended lease or the caller's own claim, a second round trip of the
// takeover script.
// [Store.CompleteBatch] and [Store.ExtendBatch] take one round trip for a
// whole batch: on a single server (or Sentinel's master) one script run
// handles every key in order (up to 1,000 a run, so that one batch never
// holds the server long, and reading the server's clock once); on a
// Cluster, a pipeline of one script per key, one round trip per node.
//
// A batch's completion is what costs Redis most, so its script reads every
// key with one MGET, where a GET each cost a nested call a key, and turns
// the expiry into bytes and text once per distinct retention; a batch that repeats
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
// # Replication and failover
//
// When a master dies, Sentinel or the Cluster promotes a replica (in 2 to
// 4s with a 1s down-after-milliseconds or cluster-node-timeout, as the
// tests measure), and the client follows it. Through that, a message's
// effect can happen twice only when:
//
//   - (a) the lease is shorter than the failover plus the client's
//     switch-over (plus, with MinReplicas, the time until the new master
//     has its replicas again): a completion in flight keeps failing, the
//     receiver gives it up when the lease ends (ResultsNotStored), and a
//     redelivery runs the handler again; or
//   - (b) a write the old master acknowledged is lost: replication is
//     asynchronous, so a claim or a completion acknowledged just before
//     the master died may never have reached the replica that is
//     promoted, and the next copy of the message claims the key afresh.
//
// Both are ruled out by a lease longer than the failover (the default 30s
// is) and [Options.MinReplicas]. With MinReplicas n, every write the
// promise rests on (a claim that wrote, a takeover, an extension, a step
// record, a completion, a release, and their batch forms) is followed by
// WAIT n ReplicaTimeout on the same connection, in the same pipeline, so
// that a call succeeds only once n replicas hold its write. The answer to a
// duplicate writes nothing and needs no WAIT (the pipeline carries one all
// the same, sent before the answer is known and not looked at: it answers
// at once while the replicas keep up, and costs a duplicate
// ReplicaTimeout when they do not). A pipeline, never a MULTI: inside MULTI, WAIT
// answers at once. On a Cluster, WAIT has no key to be routed by, and a
// ClusterClient's pipeline would send it to a master of go-redis's choosing
// (round robin): each master's writes go out in a pipeline of their own,
// through that master's client (ClusterClient.MasterForKey), ending with
// its WAIT.
//
// A shortfall (fewer replicas acknowledged than n within ReplicaTimeout)
// fails the call with an error matching [store.ErrUnavailable] and
// [ErrNotReplicated], naming how many acknowledged. The write stays on the
// master, where a failover may or may not keep it, so:
//
//   - a claim is given back at once when the master still answers (a first
//     attempt's record deleted; a takeover's left with its lease ended and
//     its attempt count as before), and the handler does not run. If the
//     master died before the give-back and its replica had the claim, the
//     claim is an orphan on the new master until its lease ends: a delay
//     of one lease for that message, never a double, since no handler ran
//     under it;
//   - a completion is retried by the receiver while its lease holds, as
//     for any store failure; a retry that finds the record completed by
//     its own token rewrites it unchanged, so that its WAIT covers the
//     write it found;
//   - an extension is not confirmed: the receiver cancels the handler at
//     its lease's local end if no extension was;
//   - an answer that the token lost its key, from a master whose WAIT
//     fell short, is the shortfall and not [store.ErrLeaseLost]: that
//     master may be one that came back empty after a failover and is a
//     master until it is made a replica, and the receiver would give up a
//     completion it should retry;
//   - under a fail-open receiver, a refused claim runs the handler
//     unprotected, as during any outage.
//
// What n must be: with one replica per master, 1, and the replica that is
// promoted is the one that acknowledged. With r replicas per master, n = r
// makes every acknowledged write present on whichever replica is promoted;
// n < r relies on the failover promoting the most advanced replica
// (Sentinel and the Cluster prefer the highest replication offset among
// the replicas they can reach, after replica-priority), which holds
// unless that replica is lost too. A master with fewer than n replicas in
// sync refuses every write through this store: with one replica per
// master, the new master after a failover has none until the old one
// rejoins as its replica (the Cluster does it when the old node returns;
// Sentinel within about 10s of its return), and the store is unavailable
// for that shard until then (a delay: deliveries are retried). Two
// replicas per master with n = 1 keep writing through a failover.
// Setting min-replicas-to-write on the servers as well makes a master
// refuse writes the same way for every client.
//
// The client settings that matter:
//
//   - Cluster: go-redis reloads its slot map on MOVED and ASK, and
//     otherwise every ClusterStateReloadInterval (a minute by default); a
//     killed master answers no MOVED, so the store asks the client to
//     reload (ReloadState, lazy and coalesced in go-redis) whenever a call
//     fails with a network error, a timeout, or CLUSTERDOWN, MOVED, ASK,
//     READONLY, TRYAGAIN, MASTERDOWN or LOADING. Without it a shard was
//     unreachable for up to a minute after the cluster had failed over in
//     seconds.
//   - Sentinel: use NewFailoverClient (a *redis.Client), which asks the
//     Sentinels for the master on every new connection. Leave
//     RouteByLatency, RouteRandomly and ReplicaOnly off: ReplicaOnly sends
//     the writes to replicas, and the other two make a client that reads
//     from replicas.
//   - DialTimeout: a master whose host is gone does not refuse a
//     connection, it leaves the dial waiting; keep it well under
//     Options.Timeout (1s, not go-redis's 5s). ReadTimeout must be more
//     than ReplicaTimeout (New checks it), and ContextTimeoutEnabled lets
//     Options.Timeout cut a read already waiting.
//
// Measured on loopback with one replica per master (the failover tests:
// 600 ids, 3 copies each, 8 workers in two consumer processes, the default
// 30s lease): with MinReplicas 1, 0 doubles and 0 lost in every run on
// Sentinel (the replica's link cut half a second before the master is
// SIGKILLed) and on a 3-master Cluster (a master SIGKILLed); without
// MinReplicas, the Sentinel run doubled about 400 effects each time, those
// of every message handled in the half second that never reached the
// replica. The cost of MinReplicas is a WAIT round trip per write: see the
// bench module's replica rows.
//
// # Inspection
//
// The Store is a [store.Inspector]: Get, Delete, DeleteIf (one script
// that reads the record and deletes it only in the states asked, or a
// claim whose lease ended by this process's clock), and Scan by prefix (an
// iterator), with SCAN (never KEYS) on every master of a Cluster, reading
// each page of records in one pipeline and skipping keys that hold no
// record of this package. Get and Scan fill in each record's step
// records (an HGETALL beside each GET); Delete and DeleteIf delete them.
package redisstore
