// Package memcore is the in-memory store behind store/memstore and the
// local tier of store/tieredstore: a bounded LRU of completed and failed
// records (its own, slots held by value with an index: records.go) beside a
// map of processing claims, under one mutex per shard of the keys (a large
// store is cut in up to 16 by a hash of the key's id), on an injected clock,
// with no goroutine of its own. Step records (store.StepStore) are kept
// beside the records, per shard, out of the way of the keys that have none
// (steps.go).
//
// It is internal so that what only a tier needs ([Store.Remember], which
// caches a record another store confirmed) stays out of memstore's public
// API. memstore documents the behaviour users rely on; this package keeps
// every rule of the store contract (package store), and the conformance
// suite runs against it through memstore.
package memcore
