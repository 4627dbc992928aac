package memstore_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
	"github.com/dedup-go/dedup/store/storetest"
)

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// setup returns a store of the given capacity on a fake clock.
func setup(t testing.TB, capacity int) (*memstore.Store, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(epoch)
	s, err := memstore.New(&memstore.Options{Capacity: capacity, Clock: clk})
	require.NoError(t, err)
	return s, clk
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		s, clk := setup(t, 0)
		return storetest.Harness{Store: s, Advance: clk.Advance, Now: clk.Now}
	})
}

// TestConformanceCoreOnly hides the optional abilities, as a store without
// them would: their subtests must skip, the others must not need them.
func TestConformanceCoreOnly(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		s, clk := setup(t, 0)
		return storetest.Harness{Store: struct{ store.Store }{s}, Advance: clk.Advance}
	})
}

func TestConformanceRealClock(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("sleeps through leases")
	}
	// One store for every subtest, as a shared server would be: the suite
	// must isolate by key alone.
	s, err := memstore.New(nil)
	require.NoError(t, err)
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		return storetest.Harness{Store: s, Advance: time.Sleep, Tick: 20 * time.Millisecond, Now: time.Now}
	})
}

func TestNew(t *testing.T) {
	t.Parallel()
	s, err := memstore.New(nil)
	require.NoError(t, err)
	require.Equal(t, memstore.DefaultCapacity, s.Stats().Capacity)

	_, err = memstore.New(&memstore.Options{Capacity: -1})
	require.ErrorIs(t, err, store.ErrInvalidConfig)
}

const (
	lease     = 10 * time.Second
	retention = time.Minute
)

var ctx = context.Background()

func acquire(t *testing.T, s *memstore.Store, key string) store.Claim {
	t.Helper()
	c, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: lease})
	require.NoError(t, err)
	return c
}

func complete(t *testing.T, s *memstore.Store, key string) {
	t.Helper()
	c := acquire(t, s, key)
	require.True(t, c.Acquired, "Acquire(%q)", key)
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: key, Token: c.Token, Result: []byte(key), Retention: retention}))
}

func TestEvictionIsCounted(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, 2)
	complete(t, s, "a")
	complete(t, s, "b")
	require.NotNil(t, s.Peek("", "a")) // a is now more recently used than b
	complete(t, s, "c")

	st := s.Stats()
	require.Equal(t, uint64(1), st.Evictions, "b was evicted before its retention ended")
	require.Equal(t, 2, st.Len)
	require.Nil(t, s.Peek("", "b"))
	require.NotNil(t, s.Peek("", "a"))
	require.True(t, acquire(t, s, "b").Acquired, "an evicted key is forgotten: its duplicate runs again")
}

// TestCapacityIsExact: Capacity is the number of records kept, in a store
// cut into shards too (the default's 100,000 is): a store of Capacity
// 101,000 keeps all of 100,000 keys (shares of it per shard kept 99,981),
// and of 1,000 more it evicts 1,000 and keeps 101,000.
func TestCapacityIsExact(t *testing.T) {
	t.Parallel()
	const capacity = 101_000
	s, _ := setup(t, capacity)
	settle := func(from, to int) {
		for i := from; i < to; i++ {
			key := "billing:" + strconv.Itoa(i)
			c := acquire(t, s, key)
			require.True(t, c.Acquired, key)
			require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: key, Token: c.Token, Retention: retention}))
		}
	}
	settle(0, 100_000)
	require.Equal(t, memstore.Stats{Len: 100_000, Capacity: capacity}, s.Stats())
	settle(100_000, 102_000)
	require.Equal(t, memstore.Stats{Len: capacity, Capacity: capacity, Evictions: 1000}, s.Stats())
	for i := 101_000; i < 102_000; i++ {
		require.NotNil(t, s.Peek("billing:", strconv.Itoa(i)), "the newest records are kept")
	}
}

func TestEvictionOfExpiredIsNotCounted(t *testing.T) {
	t.Parallel()
	s, clk := setup(t, 2)
	complete(t, s, "a")
	c := acquire(t, s, "b")
	require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: "b", Token: c.Token, Error: "boom", Retention: retention}))
	clk.Advance(retention + time.Second)
	complete(t, s, "c") // evicts a, expired
	complete(t, s, "d") // evicts b, failed and expired
	require.Zero(t, s.Stats().Evictions)
}

func TestEvictionOfFailedIsNotCounted(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, 1)
	c := acquire(t, s, "failed")
	require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: "failed", Token: c.Token, Error: "boom", Retention: retention}))
	complete(t, s, "done")
	require.Zero(t, s.Stats().Evictions)
}

func TestProcessingSurvivesCapacityPressure(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, 3)
	held := acquire(t, s, "held")
	require.True(t, held.Acquired)
	for i := range 20 {
		complete(t, s, fmt.Sprintf("other-%d", i))
	}
	require.Equal(t, 3, s.Stats().Len)
	require.Equal(t, uint64(17), s.Stats().Evictions)

	again := acquire(t, s, "held")
	require.False(t, again.Acquired, "a processing record must never be evicted for room")
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "held", Token: held.Token, Result: []byte("ok"), Retention: retention}))
	rec := s.Peek("", "held")
	require.NotNil(t, rec)
	require.Equal(t, "ok", string(rec.Result))
}

func TestInFlightBound(t *testing.T) {
	t.Parallel()
	s, clk := setup(t, 2)
	a, b := acquire(t, s, "a"), acquire(t, s, "b")

	_, err := s.Acquire(ctx, store.AcquireRequest{Key: "c", Lease: lease})
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.ErrorContains(t, err, "Options.Capacity", "the error must say which limit was hit")
	require.Equal(t, 2, s.Stats().InFlight)

	// Keys already held still answer: only new claims need room.
	require.False(t, acquire(t, s, "a").Acquired)

	// A completed claim makes room.
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "a", Token: a.Token, Result: nil, Retention: retention}))
	require.True(t, acquire(t, s, "c").Acquired)

	// So does an expired lease nobody took over: its claim is swept, and
	// its holder has lost it.
	_, err = s.Acquire(ctx, store.AcquireRequest{Key: "d", Lease: lease})
	require.ErrorIs(t, err, store.ErrUnavailable)
	clk.Advance(lease + time.Second)
	require.True(t, acquire(t, s, "d").Acquired)
	require.ErrorIs(t, s.Complete(ctx, store.CompleteRequest{Key: "b", Token: b.Token, Result: nil, Retention: retention}), store.ErrLeaseLost)
}

func TestInFlightBoundKeepsFailedRecord(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, 2)
	c := acquire(t, s, "failed")
	require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: "failed", Token: c.Token, Error: "boom", Retention: retention}))
	held := acquire(t, s, "held")
	acquire(t, s, "held too")

	_, err := s.Acquire(ctx, store.AcquireRequest{Key: "failed", Lease: lease})
	require.ErrorIs(t, err, store.ErrUnavailable)

	// The refused retry lost nothing: once there is room, it counts on.
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "held", Token: held.Token, Result: nil, Retention: retention}))
	retry := acquire(t, s, "failed")
	require.True(t, retry.Acquired)
	require.Equal(t, 2, retry.Record.Attempt)
	require.Equal(t, "boom", retry.Record.LastError)
}

func TestSweepSkipsLiveClaims(t *testing.T) {
	t.Parallel()
	s, clk := setup(t, 2)
	acquire(t, s, "a")
	clk.Advance(lease / 2)
	acquire(t, s, "b")
	clk.Advance(lease/2 + time.Second) // a expired, b did not

	require.True(t, acquire(t, s, "c").Acquired, "the expired claim of a makes room")
	_, err := s.Acquire(ctx, store.AcquireRequest{Key: "d", Lease: lease})
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.False(t, acquire(t, s, "b").Acquired, "the sweep must leave live claims alone")
}

func TestScanOrder(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, 0)
	for _, key := range []string{"k:c", "k:a", "k:b"} {
		complete(t, s, key)
	}
	acquire(t, s, "k:0")
	var keys []string
	for rec, err := range s.Scan(ctx, "k:") {
		require.NoError(t, err)
		keys = append(keys, rec.Key)
	}
	require.Equal(t, []string{"k:0", "k:a", "k:b", "k:c"}, keys)
}

// TestScanBodyMayCallStore: Scan yields a snapshot without its lock held,
// so the loop body may use the store, even delete what it is given.
func TestScanBodyMayCallStore(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, 0)
	for _, key := range []string{"k:a", "k:b"} {
		complete(t, s, key)
	}
	for rec, err := range s.Scan(ctx, "k:") {
		require.NoError(t, err)
		require.NoError(t, s.Delete(ctx, rec.Key))
	}
	require.Zero(t, s.Stats().Len)
}

// TestDuplicatesAllocateNothing is not parallel: AllocsPerRun counts the
// allocations of the whole process.
func TestDuplicatesAllocateNothing(t *testing.T) {
	s, _ := setup(t, 0)
	complete(t, s, "done")
	acquire(t, s, "held")
	var found, claimed bool

	// The first Peek of a record makes the record it answers with; the
	// duplicates after it share that one.
	require.NotNil(t, s.Peek("", "done"), "Peek must find the completed record")
	allocs := testing.AllocsPerRun(1000, func() { found = s.Peek("", "done") != nil })
	require.True(t, found, "Peek must find the completed record")
	require.Zero(t, allocs, "Peek of a completed record")

	allocs = testing.AllocsPerRun(1000, func() { found = s.Peek("", "absent") != nil })
	require.False(t, found)
	require.Zero(t, allocs, "Peek of an absent key")

	// A duplicate that reaches Acquire, of a completed or an in-flight key,
	// costs nothing either.
	for _, key := range []string{"done", "held"} {
		allocs = testing.AllocsPerRun(1000, func() {
			c, _ := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: lease})
			claimed = claimed || c.Acquired
		})
		require.False(t, claimed, "Acquire claimed %q, which was taken", key)
		require.Zero(t, allocs, "Acquire of %q", key)
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, 10)
	complete(t, s, "a")
	acquire(t, s, "b")
	require.Equal(t, memstore.Stats{Len: 1, InFlight: 1, Capacity: 10}, s.Stats())
}

// TestRefusedAcquireHidesHolderToken: a refused Acquire answers the
// holder's record without its token, which fences the holder's claim;
// Get, an operator's read, shows it.
func TestRefusedAcquireHidesHolderToken(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, 0)
	held := acquire(t, s, "held")
	c, err := s.Acquire(ctx, store.AcquireRequest{Key: "held", Lease: lease})
	require.NoError(t, err)
	require.False(t, c.Acquired)
	require.True(t, c.Record.Token.IsZero(), "a refused Acquire revealed the holder's token")
	rec, err := s.Get(ctx, "held")
	require.NoError(t, err)
	require.Equal(t, held.Token, rec.Token)
}
