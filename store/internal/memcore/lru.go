package memcore

// lru holds a shard's settled entries in least recently used order: a map
// from each entry's key, cut in two, to the entry, and a doubly linked
// list threaded through the entries themselves, so that settling a record
// allocates its entry and nothing beside it. It is not safe for concurrent
// use: the shard's mutex guards it. It does not bound itself; settle
// evicts by hand, counting what it evicts.
type lru struct {
	items map[splitKey]*entry
	// root is the list's sentinel: root.next is the most recently used
	// entry, root.prev the least.
	root entry
}

func (l *lru) init() {
	l.items = make(map[splitKey]*entry)
	l.root.next, l.root.prev = &l.root, &l.root
}

func (l *lru) len() int { return len(l.items) }

// peek returns the entry of k without marking it used.
func (l *lru) peek(k splitKey) (*entry, bool) {
	e, ok := l.items[k]
	return e, ok
}

// get returns the entry of k and marks it the most recently used.
func (l *lru) get(k splitKey) (*entry, bool) {
	e, ok := l.items[k]
	if ok && l.root.next != e {
		e.unlink()
		l.pushFront(e)
	}
	return e, ok
}

// add puts e, the entry of k, first in the list. k must not be there: the
// shard removes a key before it settles it again.
func (l *lru) add(k splitKey, e *entry) {
	l.items[k] = e
	l.pushFront(e)
}

// remove forgets k, if it is there.
func (l *lru) remove(k splitKey) {
	if e, ok := l.items[k]; ok {
		delete(l.items, k)
		e.unlink()
	}
}

// removeOldest forgets the least recently used entry and returns it; nil
// when the list is empty.
func (l *lru) removeOldest() *entry {
	e := l.root.prev
	if e == &l.root {
		return nil
	}
	delete(l.items, split(e.rec.Key))
	e.unlink()
	return e
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
