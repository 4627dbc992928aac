package memcore

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/store"
)

// testKey is key as a shard finds it under hash h, and the record a shard
// would settle for it.
func testKey(key string, h uint64) (lkey, slot) {
	prefix, id := store.SplitKey(key)
	k := lkey{prefix: prefix, id: id, h: h}
	return k, slot{data: key, hash: k.hash()}
}

func keysOf(r *records) []string {
	var out []string
	for e := range r.all {
		out = append(out, e.key())
	}
	return out
}

// TestRecordsCollisions: keys whose hashes collide (forced here: the same
// id in two namespaces, and two ids) are each found as themselves, never
// as another key of the hash, and removing one, at the start or in the
// middle of their run in the index, leaves the others found.
func TestRecordsCollisions(t *testing.T) {
	t.Parallel()
	var r records
	r.init()
	ka, a := testKey("billing:o-1", 7<<32)
	kb, b := testKey("shipping:o-1", 7<<32) // the same id, another namespace
	kc, c := testKey("billing:o-2", 7<<32)  // another id
	kd, d := testKey("billing:o-3", 8<<32)  // the next bucket: the run goes on
	for _, e := range []slot{a, b, c, d} {
		r.add(e)
	}
	require.Equal(t, 4, r.len())
	for _, k := range []lkey{ka, kb, kc, kd} {
		i := r.find(&k)
		require.NotZero(t, i, k.prefix+k.id)
		require.Equal(t, k.prefix+k.id, r.at(i).key())
	}
	require.Zero(t, r.find(&lkey{prefix: "billing:", id: "o-9", h: 7 << 32}), "a key absent from a run")
	require.NotZero(t, r.find(&lkey{prefix: "billing:o", id: "-1", h: 7 << 32}), "the same key cut elsewhere is the same key")
	require.NotZero(t, r.find(&lkey{prefix: "billing", id: ":o-1", h: 7 << 32}))

	require.Equal(t, []string{"billing:o-3", "billing:o-2", "shipping:o-1", "billing:o-1"}, keysOf(&r), "most recently used first")
	r.use(r.find(&ka))
	require.Equal(t, []string{"billing:o-1", "billing:o-3", "billing:o-2", "shipping:o-1"}, keysOf(&r))

	r.remove(r.find(&kb)) // the middle of the run
	require.Equal(t, 3, r.len())
	require.Zero(t, r.find(&kb))
	for _, k := range []lkey{ka, kc, kd} {
		require.NotZero(t, r.find(&k), "the rest of the run stays found: %s", k.prefix+k.id)
	}

	i := r.oldest()
	require.Equal(t, "billing:o-2", r.at(i).key())
	r.remove(i)
	require.Zero(t, r.find(&kc))
	require.NotZero(t, r.find(&ka))
	require.NotZero(t, r.find(&kd))

	r.remove(r.oldest())
	last := r.oldest()
	r.remove(last)
	require.Zero(t, r.oldest())
	require.Zero(t, r.len())
	require.Empty(t, keysOf(&r))
	require.Equal(t, make([]uint32, len(r.index)), r.index, "no bucket is left behind")

	// A freed slot is cleared and reused: it keeps no data alive.
	e := r.at(last)
	require.Empty(t, e.data)
	require.Nil(t, e.peeked)
	require.Equal(t, last, r.free)
	require.Equal(t, last, r.add(a), "the slot freed last is the next one used")
}

// TestRecordsAgainstModel: random adds, uses and removals of keys of few
// hashes (long runs in the index, wrapping at its end, and its growth)
// leave what a map and a list say: every key present found as itself,
// every other not found, in least recently used order.
func TestRecordsAgainstModel(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	var r records
	r.init()
	var order []string // the model: most recently used first
	hashOf := func(key string) uint64 {
		n, _ := strconv.Atoi(strings.TrimPrefix(key, "k:"))
		// Few hashes, at both ends of the index, so that runs wrap.
		return uint64([]uint32{0, 1 << 31, 1<<31 - 1, 1<<32 - 1, 1<<32 - 2}[n%5]) << 32
	}
	for step := range 20_000 {
		key := "k:" + strconv.Itoa(rng.IntN(300))
		k, e := testKey(key, hashOf(key))
		i := r.find(&k)
		at := slices.Index(order, key)
		require.Equal(t, at >= 0, i != 0, "step %d: find(%s)", step, key)
		switch {
		case i == 0:
			r.add(e)
			order = slices.Insert(order, 0, key)
		case rng.IntN(2) == 0:
			r.use(i)
			order = slices.Insert(slices.Delete(order, at, at+1), 0, key)
		default:
			r.remove(i)
			order = slices.Delete(order, at, at+1)
		}
		if rng.IntN(50) == 0 && len(order) > 0 {
			require.Equal(t, order[len(order)-1], r.at(r.oldest()).key(), "step %d: the oldest", step)
			r.remove(r.oldest())
			order = order[:len(order)-1]
		}
		require.Equal(t, len(order), r.len())
	}
	require.Equal(t, order, keysOf(&r))
	for n := range 300 {
		key := "k:" + strconv.Itoa(n)
		k, _ := testKey(key, hashOf(key))
		i := r.find(&k)
		require.Equal(t, slices.Contains(order, key), i != 0, key)
		if i != 0 {
			require.Equal(t, key, r.at(i).key())
		}
	}
}

// TestOneIDInManyNamespacesManyHashes: one id in a thousand namespaces (a
// namespace per tenant, ids that repeat across tenants) is a thousand keys
// under about a thousand hashes, not one hash that every lookup of the id
// would probe past all the others.
func TestOneIDInManyNamespacesManyHashes(t *testing.T) {
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
	hashes := map[uint32]bool{}
	for e := range sh.settled.all {
		hashes[e.hash] = true
	}
	require.Greater(t, len(hashes), tenants-10, "distinct hashes")
}

// TestPack: a record's parts come back as they went in, whatever their
// lengths (one byte of length each, or more), and a record of a key alone
// is the key itself, with no copy.
func TestPack(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 300)
	for _, p := range []struct{ key, fingerprint, lastError, result string }{
		{"ns:k", "fp", "boom", "ok"},
		{"ns:k", "", "", "ok"},
		{"ns:k", "fp", "", ""},
		{"ns:k", "", "boom", ""},
		{long, long + "f", long + "e", long + "r"},
		{"k", "", "", long},
	} {
		data, packed := pack(p.key, p.fingerprint, p.lastError, []byte(p.result))
		require.True(t, packed)
		require.Equal(t, p.key, packedKey(data))
		key, fingerprint, lastError, result := unpack(data)
		require.Equal(t, p, struct{ key, fingerprint, lastError, result string }{key, fingerprint, lastError, string(result)})
		require.Equal(t, len(result), cap(result), "an append to the result must copy")
	}
	key := "ns:" + strconv.Itoa(42)
	data, packed := pack(key, "", "", nil)
	require.False(t, packed)
	require.Same(t, unsafeData(key), unsafeData(data), "a bare key is kept, not copied")
}

// TestLongestRetention: a retention too long to count in nanoseconds from
// the store's epoch keeps the record for good; it does not wrap round into
// the past.
func TestLongestRetention(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1e9, 0))
	s, err := New(&Options{Clock: clk})
	require.NoError(t, err)
	clk.Advance(time.Hour) // now is past the epoch: now + retention overflows
	c, err := s.Acquire(t.Context(), store.AcquireRequest{Key: "ns:k", Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.Complete(t.Context(), store.CompleteRequest{Key: "ns:k", Token: c.Token, Retention: math.MaxInt64}))
	clk.Advance(100 * 365 * 24 * time.Hour)
	rec := s.Peek("ns:", "k")
	require.NotNil(t, rec)
	require.True(t, rec.ExpiresAt.After(clk.Now()))
}
