package memcore

// lkey is a key as a shard's LRU finds it: cut in two as store.SplitKey
// cuts it (the parts share the key's memory), with its hash (see
// Store.locate).
type lkey struct {
	prefix, id string
	h          uint64
}

// matches reports whether e is the record of k.
func (k lkey) matches(e *entry) bool {
	key := e.key
	return len(key) == len(k.prefix)+len(k.id) && key[:len(k.prefix)] == k.prefix && key[len(k.prefix):] == k.id
}

// lru holds a shard's settled entries in least recently used order. Its
// map goes from the hash of a key to the entries under it, chained through
// the entries (keys whose hashes collide), and a doubly linked list
// threads through the entries themselves. So settling a record allocates
// its entry and nothing beside it, and evicting the oldest one deletes a
// number from the map without reading its key. It is not safe for concurrent use: the
// shard's mutex guards it. It does not bound itself: settle evicts by
// hand, counting what it evicts.
type lru struct {
	items map[uint64]*entry
	n     int
	// root is the list's sentinel: root.next is the most recently used
	// entry, root.prev the least.
	root entry
}

func (l *lru) init() {
	l.items = make(map[uint64]*entry)
	l.root.next, l.root.prev = &l.root, &l.root
}

func (l *lru) len() int { return l.n }

// peek returns the entry of k without marking it used.
func (l *lru) peek(k lkey) (*entry, bool) {
	for e := l.items[k.h]; e != nil; e = e.hnext {
		if k.matches(e) {
			return e, true
		}
	}
	return nil, false
}

// get returns the entry of k and marks it the most recently used.
func (l *lru) get(k lkey) (*entry, bool) {
	e, ok := l.peek(k)
	if ok && l.root.next != e {
		e.unlink()
		l.pushFront(e)
	}
	return e, ok
}

// add puts e first in the list, under e.hash. Its key must not be there:
// the shard removes a key before it settles it again.
func (l *lru) add(e *entry) {
	e.hnext = l.items[e.hash]
	l.items[e.hash] = e
	l.n++
	l.pushFront(e)
}

// remove forgets k, if it is there.
func (l *lru) remove(k lkey) {
	if e, ok := l.peek(k); ok {
		l.drop(e)
	}
}

// removeOldest forgets the least recently used entry and returns it; nil
// when the list is empty.
func (l *lru) removeOldest() *entry {
	e := l.root.prev
	if e == &l.root {
		return nil
	}
	l.drop(e)
	return e
}

// all yields every entry, the most recently used first.
func (l *lru) all(yield func(*entry) bool) {
	for e := l.root.next; e != &l.root; e = e.next {
		if !yield(e) {
			return
		}
	}
}

// drop takes e, which is held, out of its chain and the list.
func (l *lru) drop(e *entry) {
	if head := l.items[e.hash]; head == e {
		if e.hnext == nil {
			delete(l.items, e.hash)
		} else {
			l.items[e.hash] = e.hnext
		}
	} else {
		p := head
		for p.hnext != e {
			p = p.hnext
		}
		p.hnext = e.hnext
	}
	e.hnext = nil
	l.n--
	e.unlink()
}

func (l *lru) pushFront(e *entry) {
	e.prev, e.next = &l.root, l.root.next
	l.root.next.prev = e
	l.root.next = e
}

// unlink takes e out of its list. Its links are cleared, so that an entry
// a caller still holds (Peek shares them) keeps no other entry alive.
func (e *entry) unlink() {
	e.prev.next = e.next
	e.next.prev = e.prev
	e.prev, e.next = nil, nil
}
