// Package memstore is the in-process [store.Store], the embedded default:
// no server to run, and a duplicate of a completed message answered from
// memory without I/O ([Store.Peek]).
//
//	store, err := memstore.New(nil) // 100_000 records, real time
//	if err != nil { ... }
//	rcv, err := dedup.NewReceiver(store, key, handler, &dedup.Config{Namespace: "billing"})
//
// # What it guarantees
//
// Every method is one atomic step under the mutex of the key's shard (see
// Capacity and eviction): of many concurrent Acquires of a key exactly one
// claims it, and a claim whose lease was
// taken over is fenced off by its token ([store.ErrLeaseLost]). It keeps
// every rule of the contract (package store) and passes
// [github.com/dedup-go/dedup/store/storetest]. Where the contract leaves
// a choice, memstore takes the lenient one: a call with a token whose lease
// has expired succeeds, with its full effect, until another Acquire takes
// the key over.
//
// It guarantees nothing beyond its process:
//
//   - Single process only. Two processes (two replicas of a consumer) with
//     a memstore each deduplicate independently, so a message delivered to
//     both runs twice. Share a store across processes (redisstore, pgstore)
//     when a broker can deliver one message to more than one process.
//   - Lost on restart. Every record, completed or in flight, is forgotten
//     when the process ends, so a redelivery after a restart runs again.
//
// # Capacity and eviction
//
// Options.Capacity bounds the completed and failed records; past it the
// least recently used one is evicted. Evicting a completed record before
// its retention ends breaks deduplication for that key: a duplicate
// arriving later runs the handler again. [Store.Stats] counts these
// evictions; size Capacity above the message rate times the retention, and
// watch the count.
//
// A store of Capacity 8,192 or more (the default is 100,000) is cut into
// shards, up to 16, by a hash of the key's id (the part after its
// namespace): each has its own mutex, so that
// deliveries of different keys rarely wait for one another, and its share
// of Capacity (rounded up). Eviction then takes the least recently used
// record of the key's shard, and the bound of claims below is per shard
// too. A smaller store is one piece, bounded exactly.
//
// A processing record is never evicted for room: a second delivery would
// run while the first still works. Claims are kept apart, bounded by the
// same Capacity, and when that many are processing Acquire fails with an
// error matching [store.ErrUnavailable] (the receiver then refuses or
// bypasses the delivery, as configured) until a claim completes, fails, or
// its lease expires. An expired claim swept to make that room is forgotten
// with its attempt count, and its holder's later calls get
// [store.ErrLeaseLost].
//
// # What a record costs
//
// A completed record takes about 232 bytes of the heap with a key of 14
// bytes and a result of 11 (BenchmarkRetainedHeap): its entry of 176
// bytes, the key and the result, and its share of the LRU's map. An entry
// keeps what [store.Record] answers in fewer bytes (times as Unix
// nanoseconds, but for ExpiresAt); the first [Store.Peek] of a record
// makes its store.Record, about 200 bytes more, which the later Peeks of
// it share.
//
// # Time and expiry
//
// Leases and retention are read from Options.Clock, so a [clock.Fake]
// drives them in tests. Expiry is lazy: a record is found expired when it
// is next touched, and an expired claim is swept only when Acquire needs
// its room. The store starts no goroutine and needs no Close.
package memstore
