package memcore

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
)

// testEntry is the entry of key under hash h, as a shard settles it.
func testEntry(key string, h uint64) (*entry, lkey) {
	prefix, id := store.SplitKey(key)
	return &entry{key: key, hash: h}, lkey{prefix: prefix, id: id, h: h}
}

// TestLRUChains: keys whose hashes collide (forced here: the same id in
// two namespaces, and two ids) are chained under one hash; each is found
// as itself, never as another key of its chain, and leaves its chain and
// the list alone, whether it heads the chain or not, by remove or as the
// oldest.
func TestLRUChains(t *testing.T) {
	t.Parallel()
	var l lru
	l.init()
	a, ka := testEntry("billing:o-1", 7)
	b, kb := testEntry("shipping:o-1", 7) // the same id, another namespace
	c, kc := testEntry("billing:o-2", 7)  // another id
	d, kd := testEntry("billing:o-3", 9)
	for _, e := range []*entry{a, b, c, d} {
		l.add(e)
	}
	require.Equal(t, 4, l.len())
	for _, tc := range []struct {
		k lkey
		e *entry
	}{{ka, a}, {kb, b}, {kc, c}, {kd, d}} {
		got, ok := l.peek(tc.k)
		require.True(t, ok, tc.e.key)
		require.Same(t, tc.e, got)
	}
	_, ok := l.peek(lkey{prefix: "billing:", id: "o-9", h: 7})
	require.False(t, ok, "a key absent from a chain")
	_, ok = l.peek(lkey{prefix: "billing:o", id: "-1", h: 7})
	require.True(t, ok, "the same key cut elsewhere is the same key")
	_, ok = l.peek(lkey{prefix: "billing", id: ":o-1", h: 7})
	require.True(t, ok)

	require.Equal(t, []*entry{d, c, b, a}, collect(&l), "most recently used first")
	_, _ = l.get(ka) // a, the tail of its chain, becomes the most recent
	require.Equal(t, []*entry{a, d, c, b}, collect(&l))

	l.remove(kb) // the middle of its chain
	require.Equal(t, 3, l.len())
	_, ok = l.peek(kb)
	require.False(t, ok)
	for _, k := range []lkey{ka, kc} {
		_, ok := l.peek(k)
		require.True(t, ok, "the rest of the chain stays")
	}

	require.Same(t, c, l.removeOldest(), "c, the head of its chain, is the oldest")
	_, ok = l.peek(kc)
	require.False(t, ok)
	got, ok := l.peek(ka)
	require.True(t, ok)
	require.Same(t, a, got)

	require.Same(t, d, l.removeOldest())
	require.Same(t, a, l.removeOldest())
	require.Nil(t, l.removeOldest())
	require.Zero(t, l.len())
	require.Empty(t, l.items, "no chain is left behind")
	require.Nil(t, a.prev, "an entry out of the list holds no other entry")
	require.Nil(t, a.next)
	require.Nil(t, a.hnext)
}

func collect(l *lru) []*entry {
	var out []*entry
	for e := range l.all {
		out = append(out, e)
	}
	return out
}

// TestOneIDInManyNamespacesMakesNoChain: one id in a thousand namespaces
// (a namespace per tenant, ids that repeat across tenants) is a thousand
// keys under a thousand hashes, not one chain that every lookup of the id
// would walk.
func TestOneIDInManyNamespacesMakesNoChain(t *testing.T) {
	t.Parallel()
	s, err := New(nil)
	require.NoError(t, err)
	const tenants = 1000
	for i := range tenants {
		key := "tenant-" + strconv.Itoa(i) + ":o-1"
		c, err := s.Acquire(t.Context(), store.AcquireRequest{Key: key, Lease: time.Minute})
		require.NoError(t, err)
		require.NoError(t, s.Complete(t.Context(), store.CompleteRequest{Key: key, Token: c.Token, Retention: time.Hour}))
	}
	sh, _ := s.locate("tenant-0:o-1")
	require.Equal(t, tenants, sh.settled.len(), "one id: one shard")
	longest := 0
	for _, head := range sh.settled.items {
		n := 0
		for e := head; e != nil; e = e.hnext {
			n++
		}
		longest = max(longest, n)
	}
	require.LessOrEqual(t, longest, 2, "the longest chain")
}
