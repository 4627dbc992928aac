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
// Options.Capacity is the number of completed and failed records kept;
// past it one is evicted. Evicting a completed record before its
// retention ends breaks deduplication for that key: a duplicate arriving
// later runs the handler again. [Store.Stats] counts these evictions;
// size Capacity above the message rate times the retention, and watch the
// count.
//
// A store of Capacity 8,192 or more (the default is 100,000) is cut into
// shards, up to 16, by a hash of the key's id (the part after its
// namespace), each with its own mutex, so that deliveries of different
// keys rarely wait for one another. Capacity still bounds the whole store,
// exactly: a store of Capacity 101,000 keeps every one of 100,000 keys,
// however unevenly they fall into the shards. Each shard keeps its records
// in least recently used order (a Peek or a replaying Acquire is a use),
// and when the store is full the new record's shard evicts its own least
// recently used one (another shard does when it has none): the record
// evicted is among the oldest of the store, not always the oldest. A
// smaller store is one piece, in one order.
//
// A processing record is never evicted for room: a second delivery would
// run while the first still works. Claims are kept apart, bounded by the
// same Capacity, for the whole store too, and when that many are
// processing Acquire fails with an error matching [store.ErrUnavailable]
// (the receiver then refuses or bypasses the delivery, as configured)
// until a claim completes, fails, or its lease expires. Expired claims are
// swept from the shard of the Acquire that needs room; a swept claim is
// forgotten with its attempt count, and its holder's later calls get
// [store.ErrLeaseLost].
//
// # Step records
//
// The Store is a [store.StepStore]: it keeps the step records of a
// handler's named steps (dedup.Step) with the key's record, beside it in
// the key's shard. They stay while the record does (a Release and the
// retry that takes the failed key over, a takeover after a lease ended, a
// lost answer's Acquire granted again with its token, a Complete), and go
// with it: when it expires (lazily, when the record is found expired or
// evicted), is evicted, is swept as an expired claim, or is deleted. Get,
// Scan and DeleteIf answer with a copy of them in Record.Steps; Acquire
// and Peek leave them out. Only the token holding a processing key reads
// or writes them ([store.ErrLeaseLost] otherwise), with the same leniency
// as Complete: a claim whose lease ended still may, until another Acquire
// takes the key over.
//
// Step records do not count against Capacity, which counts records: a
// key's step records cost the store their names and values, copied, and
// an entry of its shard's table of them (its key and a list). A value of
// any length is kept, as a result is: what bounds it is the process's
// memory, for every record in retention, so keep what a step returns
// small, as a result is kept small. A key whose handler records no steps
// costs what it did before step records existed: the store keeps nothing
// for it, and the shards of a store that never saw a step record hold no
// table of them at all.
//
// A processing record is never evicted, so neither are its step records.
// A failed record is evicted for room like any other, step records and
// all: the next attempt then finds none and runs every step again, as the
// first attempt did. Size Capacity as the section above says and this
// does not happen within retention. A completed record evicted loses its
// step records with it, which matters no more: its duplicate runs again
// anyway (Stats.Evictions).
//
// # What a record costs
//
// A completed record takes about 122 bytes of the heap with a key of 13
// bytes and a result of 11 (BenchmarkRetainedHeap; a map[string]struct{}
// of the same keys takes 51): a slot of 80 bytes, held by value in blocks
// of 127, with the record's times and token; one allocation of 32 bytes
// for its key, fingerprint, last error and result together; and 5 to 8
// bytes of index. A record with nothing but its key (an empty result, no
// fingerprint) keeps the caller's key string and allocates nothing of its
// own. The first [Store.Peek] of a record makes the [store.Record] it
// answers with, about 200 bytes more, which the later Peeks of it share.
//
// # Time and expiry
//
// Leases and retention are read from Options.Clock, so a [clock.Fake]
// drives them in tests. Expiry is lazy: a record is found expired when it
// is next touched, and an expired claim is swept only when Acquire needs
// its room. The store starts no goroutine and needs no Close.
package memstore
