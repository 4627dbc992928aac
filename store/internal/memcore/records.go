package memcore

import (
	"time"

	"github.com/dedup-go/dedup/store"
)

// slot is a settled (completed or failed) record in 80 bytes, held by
// value in its shard's records: no allocation of its own, no pointer to
// follow, nothing rounded up to a size class. A record's variable parts
// are one string (data, blob.go); what a store.Record holds as time.Time
// (24 bytes each) is a Unix or an epoch offset in nanoseconds; the state,
// the remembered mark and the attempt count share a word; its links in the
// LRU list and in the index are slot numbers.
//
// The entry this replaced, one allocation per record with four strings,
// three pointers of links and chains and a time.Time, took 176 bytes, 232
// of the heap with its key, result and map slot (memstore's
// BenchmarkRetainedHeap); a slot takes 80 and the record 122.
//
// A slot is reused once its record is gone, so nothing of it is read
// without the shard's mutex: Peek takes what it answers with under it.
type slot struct {
	data string // the key, or the parts packed (meta&packed)
	// peeked is the record Peek answers with, made at the first Peek and
	// shared by the later ones: most records are never peeked, and those
	// that are pay for their store.Record once.
	peeked *store.Record
	// token is the token of the claim that completed or released the
	// record (Record.Token). Complete with it again succeeds without a
	// change, unless remembered: no token completes a record that another
	// store holds.
	token store.Token
	// created and done are Record.CreatedAt and CompletedAt in Unix
	// nanoseconds, 0 when unknown (a remembered record without them).
	created, done int64
	// expires is ExpiresAt as nanoseconds after the store's epoch, a
	// reading of its clock with the monotonic one on the real clock, so
	// that Peek checks it on the monotonic clock alone (since).
	expires int64
	// hash is the upper half of the hash of the key as the shard finds it
	// (lkey.h): it places the slot in the index and spares comparing keys
	// of other hashes.
	hash uint32
	// meta is the attempt count (saturated at maxAttempt) above the flags.
	meta uint32
	// prev and next link the slot into the LRU list, or next into the
	// list of free slots.
	prev, next uint32
}

const (
	metaFailed     = 1 << iota // else completed
	metaRemembered             // cached for another store (Remember)
	metaPacked                 // data is packed, not the bare key
	metaFlags      = iota
	maxAttempt     = 1<<(32-metaFlags) - 1
)

func (e *slot) completed() bool  { return e.meta&metaFailed == 0 }
func (e *slot) remembered() bool { return e.meta&metaRemembered != 0 }
func (e *slot) attempt() int     { return int(e.meta >> metaFlags) }

// setMeta sets the flags and attempt count of e.
func (e *slot) setMeta(attempt int, flags uint32) {
	e.meta = uint32(min(max(attempt, 0), maxAttempt))<<metaFlags | flags
}

func (e *slot) key() string {
	if e.meta&metaPacked == 0 {
		return e.data
	}
	return packedKey(e.data)
}

// parts returns the key, fingerprint, last error and result of e.
func (e *slot) parts() (key, fingerprint, lastError string, result []byte) {
	if e.meta&metaPacked == 0 {
		return e.data, "", "", nil
	}
	return unpack(e.data)
}

// expired reports whether e's retention ended by at, an offset from the
// store's epoch.
func (e *slot) expired(at int64) bool { return at >= e.expires }

// record returns the record e holds, its ExpiresAt an offset from epoch.
func (e *slot) record(epoch time.Time) store.Record {
	key, fingerprint, lastError, result := e.parts()
	return store.Record{
		Key:         key,
		State:       e.state(),
		Attempt:     e.attempt(),
		Fingerprint: fingerprint,
		Result:      result,
		LastError:   lastError,
		ExpiresAt:   epoch.Add(time.Duration(e.expires)),
		Token:       e.token,
		CreatedAt:   fromUnixNano(e.created),
		CompletedAt: fromUnixNano(e.done),
	}
}

// lkey is a key as a shard's records find it: cut in two as store.SplitKey
// cuts it (the parts share the key's memory), with its hash (see
// Store.locate).
type lkey struct {
	prefix, id string
	h          uint64
}

func (k lkey) hash() uint32 { return uint32(k.h >> 32) }

// matches reports whether key is k's.
func (k *lkey) matches(key string) bool {
	return len(key) == len(k.prefix)+len(k.id) && key[:len(k.prefix)] == k.prefix && key[len(k.prefix):] == k.id
}

// A chunk holds chunkSlots slots, numbered from chunkLen apart: 127 of 80
// bytes and the allocator's header of 8 (objects over 512 bytes that hold
// pointers have one) fill the size class of 10,240 bytes, where 128 would
// take one of 10,880. Slot numbers are names, not positions: the last of
// each chunk's 128 is never handed out.
const (
	chunkBits  = 7
	chunkLen   = 1 << chunkBits
	chunkSlots = chunkLen - 1
)

// records holds a shard's settled records in least recently used order.
// Slots live in chunks, found by number (slot i is chunks[i/chunkLen][i%
// chunkLen], see chunkSlots), so the records of a shard are a few large
// allocations, and growing them copies only the first chunk, while it is
// small. Slot 0 is the root of the LRU list, a circle: root.next is the
// most recently used record, root.prev the least. Freed slots are kept on
// a list through next, from free, for the next record.
//
// The index finds a slot by key: open addressing with linear probing over
// slot numbers (0 for an empty bucket), half to three quarters full. Four
// bytes a bucket are 5 to 8 per record, where a map[uint64]*entry took
// about 26. A key is found only by comparing it whole, after its hash, so
// keys whose hashes collide are two records, never one found as the other.
//
// It is not safe for concurrent use: the shard's mutex guards it. It does
// not bound itself: the shard evicts by hand, counting what it evicts. A
// *slot it returns is valid until the next add, which may move the first
// chunk.
type records struct {
	chunks [][]slot
	free   uint32
	n      int
	index  []uint32
}

func (r *records) init() {
	r.chunks = [][]slot{make([]slot, 1, 8)} // the root
	r.index = make([]uint32, 8)
}

func (r *records) len() int { return r.n }

func (r *records) at(i uint32) *slot { return &r.chunks[i>>chunkBits][i&(chunkLen-1)] }

func (r *records) root() *slot { return &r.chunks[0][0] }

// find returns the slot number of k's record, 0 when there is none. k is
// a pointer, which costs less than copying its five words on every Peek.
func (r *records) find(k *lkey) uint32 {
	h := k.hash()
	for b := r.home(h); ; b = r.after(b) {
		i := r.index[b]
		if i == 0 {
			return 0
		}
		if e := r.at(i); e.hash == h && k.matches(e.key()) {
			return i
		}
	}
}

// home returns the bucket of choice of hash h: h scaled to the index's
// length (which is not a power of two: see grow).
func (r *records) home(h uint32) uint32 {
	return uint32(uint64(h) * uint64(len(r.index)) >> 32)
}

// after returns the bucket after b, the first after the last.
func (r *records) after(b uint32) uint32 {
	if b++; int(b) == len(r.index) {
		return 0
	}
	return b
}

// dist returns how many buckets after a b is, going round.
func (r *records) dist(a, b uint32) uint32 {
	if b >= a {
		return b - a
	}
	return b + uint32(len(r.index)) - a
}

// place puts slot i, of hash h, in the first empty bucket from its home.
func (r *records) place(i, h uint32) {
	b := r.home(h)
	for r.index[b] != 0 {
		b = r.after(b)
	}
	r.index[b] = i
}

// use marks slot i the most recently used.
func (r *records) use(i uint32) {
	if r.root().next != i {
		r.unlink(i)
		r.pushFront(i)
	}
}

// add stores e as the most recently used record and returns its slot
// number. Its key must not be there: the shard removes a key before it
// settles it again.
func (r *records) add(e slot) uint32 {
	if (r.n+1)*4 > len(r.index)*3 {
		r.grow()
	}
	i := r.alloc()
	*r.at(i) = e
	r.place(i, e.hash)
	r.n++
	r.pushFront(i)
	return i
}

// alloc returns a free slot's number.
func (r *records) alloc() uint32 {
	if i := r.free; i != 0 {
		r.free = r.at(i).next
		return i
	}
	last := len(r.chunks) - 1
	c := r.chunks[last]
	if len(c) == chunkSlots {
		c, last = make([]slot, 0, chunkSlots), last+1
		r.chunks = append(r.chunks, c)
	}
	// The first chunk grows by append while small, so that a small store
	// holds little; the root it holds is found by number, never kept.
	r.chunks[last] = append(c, slot{})
	return uint32(last<<chunkBits | len(c))
}

// grow makes the index half as long again. Doubling would leave it
// between three eighths and three quarters full, 7 bytes a record on
// average and 10.7 at worst; by halves it is half to three quarters full,
// 6.4 bytes on average and 8 at worst.
func (r *records) grow() {
	old := r.index
	r.index = make([]uint32, len(old)+len(old)/2)
	for _, i := range old {
		if i != 0 {
			r.place(i, r.at(i).hash)
		}
	}
}

// remove forgets the record in slot i and frees the slot.
func (r *records) remove(i uint32) {
	e := r.at(i)
	b := r.home(e.hash)
	for r.index[b] != i {
		b = r.after(b)
	}
	// Shift back the records after it in its run that may move, so that
	// no probe stops early at the hole (Knuth's algorithm R): a record
	// whose bucket of choice is at or before the hole, going round, moves.
	for j := r.after(b); r.index[j] != 0; j = r.after(j) {
		if k := r.index[j]; r.dist(r.home(r.at(k).hash), j) >= r.dist(b, j) {
			r.index[b] = k
			b = j
		}
	}
	r.index[b] = 0
	r.unlink(i)
	// Cleared, so that the freed slot keeps no data or record alive.
	*e = slot{next: r.free}
	r.free = i
	r.n--
}

// oldest returns the slot number of the least recently used record, 0
// when there is none.
func (r *records) oldest() uint32 { return r.root().prev }

// all yields every record, the most recently used first. The body must
// not add or remove records.
func (r *records) all(yield func(*slot) bool) {
	for i := r.root().next; i != 0; i = r.at(i).next {
		if !yield(r.at(i)) {
			return
		}
	}
}

func (r *records) pushFront(i uint32) {
	root := r.root()
	e := r.at(i)
	e.prev, e.next = 0, root.next
	r.at(root.next).prev = i
	root.next = i
}

func (r *records) unlink(i uint32) {
	e := r.at(i)
	r.at(e.prev).next = e.next
	r.at(e.next).prev = e.prev
}

func (e *slot) state() store.State {
	if e.completed() {
		return store.StateCompleted
	}
	return store.StateFailed
}

// fingerprint returns the fingerprint of e.
func (e *slot) fingerprint() string {
	_, fingerprint, _, _ := e.parts()
	return fingerprint
}
