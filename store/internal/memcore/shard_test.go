package memcore_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/internal/memcore"
)

// TestShardsFindEveryKey: in a store cut into shards, a record completed
// under its whole key is found by Peek under its key cut in two (the shard
// is chosen by a hash of either form alike), by Get, and is counted once
// by Stats, as claims are.
func TestShardsFindEveryKey(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	s, err := memcore.New(&memcore.Options{Capacity: memcore.DefaultCapacity, Clock: clk})
	require.NoError(t, err)
	ctx := t.Context()
	const n = 2000
	for i := range n {
		claimAndComplete(t, s, "billing:o-"+strconv.Itoa(i))
	}
	for i := range n {
		id := "o-" + strconv.Itoa(i)
		rec := s.Peek("billing:", id)
		require.NotNil(t, rec, "Peek of %s", id)
		require.Equal(t, "billing:"+id, string(rec.Result))
		got, err := s.Get(ctx, "billing:"+id)
		require.NoError(t, err)
		require.Equal(t, store.StateCompleted, got.State)
	}
	for i := range 10 {
		_, err := s.Acquire(ctx, store.AcquireRequest{Key: "billing:new-" + strconv.Itoa(i), Lease: time.Minute})
		require.NoError(t, err)
	}
	require.Equal(t, memcore.Stats{Len: n, InFlight: 10, Capacity: memcore.DefaultCapacity}, s.Stats())
	found := 0
	for _, err := range s.Scan(ctx, "billing:o-") {
		require.NoError(t, err)
		found++
	}
	require.Equal(t, n, found, "Scan walks every shard")
}

// TestShardsShareCapacity: a store cut into shards keeps Capacity records,
// however they fall into its shards, and counts every eviction.
func TestShardsShareCapacity(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	const capacity = 8192 // two shards
	s, err := memcore.New(&memcore.Options{Capacity: capacity, Clock: clk})
	require.NoError(t, err)
	const n = 10000
	for i := range n {
		claimAndComplete(t, s, "k"+strconv.Itoa(i))
	}
	st := s.Stats()
	require.Equal(t, capacity, st.Len)
	require.Equal(t, uint64(n-st.Len), st.Evictions, "every eviction is counted")
}

// claimAndComplete claims key in s and completes it with the key as its
// result, kept for an hour.
func claimAndComplete(t *testing.T, s *memcore.Store, key string) {
	t.Helper()
	c, err := s.Acquire(t.Context(), store.AcquireRequest{Key: key, Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, c.Acquired, "%s was not claimed", key)
	require.NoError(t, s.Complete(t.Context(), store.CompleteRequest{Key: key, Token: c.Token, Result: []byte(key), Retention: time.Hour}))
}

// TestOneIDInManyNamespaces: the records of one id in several namespaces
// share the hash that finds them; each is answered as itself, by Peek,
// Get and Scan, and deleting or evicting one leaves the others.
func TestOneIDInManyNamespaces(t *testing.T) {
	t.Parallel()
	for _, capacity := range []int{3, memcore.DefaultCapacity} {
		s, err := memcore.New(&memcore.Options{Capacity: capacity, Clock: clock.NewFake(epoch)})
		require.NoError(t, err)
		ctx := t.Context()
		for _, ns := range []string{"a:", "b:", "c:"} {
			claimAndComplete(t, s, ns+"o-1")
		}
		for _, ns := range []string{"a:", "b:", "c:"} {
			rec := s.Peek(ns, "o-1")
			require.NotNil(t, rec, "Peek of %so-1", ns)
			require.Equal(t, ns+"o-1", string(rec.Result))
		}
		require.NoError(t, s.Delete(ctx, "b:o-1"))
		require.Nil(t, s.Peek("b:", "o-1"))
		_, err = s.Get(ctx, "b:o-1")
		require.ErrorIs(t, err, store.ErrNotFound)
		for _, ns := range []string{"a:", "c:"} {
			got, err := s.Get(ctx, ns+"o-1")
			require.NoError(t, err)
			require.Equal(t, ns+"o-1", string(got.Result))
		}
		if capacity == 3 {
			// More records push out the least recently used: a:o-1, then
			// c:o-1 (Get, unlike Peek, does not mark a record used).
			claimAndComplete(t, s, "d:o-1")
			claimAndComplete(t, s, "e:o-1")
			_, err = s.Get(ctx, "a:o-1")
			require.ErrorIs(t, err, store.ErrNotFound)
			_, err = s.Get(ctx, "c:o-1")
			require.NoError(t, err)
			claimAndComplete(t, s, "f:o-1")
			_, err = s.Get(ctx, "c:o-1")
			require.ErrorIs(t, err, store.ErrNotFound)
			require.Equal(t, uint64(2), s.Stats().Evictions)
		}
		var keys []string
		for rec, err := range s.Scan(ctx, "") {
			require.NoError(t, err)
			keys = append(keys, rec.Key)
		}
		if capacity == 3 {
			require.Equal(t, []string{"d:o-1", "e:o-1", "f:o-1"}, keys)
		} else {
			require.Equal(t, []string{"a:o-1", "c:o-1"}, keys)
		}
	}
}
