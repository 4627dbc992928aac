package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/rediscore"
	"github.com/dedup-go/dedup/store/redisstore"
)

// stepMap reads step records as a map of name to value.
func stepMap(recs []store.StepRecord) map[string]string {
	m := map[string]string{}
	for _, r := range recs {
		m[r.Name] = string(r.Value)
	}
	return m
}

// laterMillisecond returns once this process's clock reads a later
// millisecond than at: a record created then has another creation time.
func laterMillisecond(t *testing.T, at time.Time) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for time.Now().UnixMilli() <= at.UnixMilli() {
		require.True(t, time.Now().Before(deadline), "the clock did not move")
		time.Sleep(100 * time.Microsecond)
	}
}

// TestStepsStaleHash: the steps hash of a record that expired outlives it
// (its expiry is the record's plus the retention); the key's next record,
// created later, neither reads it (LoadSteps, Get, Scan) nor extends it,
// and its first SaveStep replaces it.
func TestStepsStaleHash(t *testing.T) {
	c := redistest.Client(t)
	s := newStore(t, c, nil)
	ctx := t.Context()
	for _, key := range []string{"orders:1", "orders:{42}:2"} {
		t.Run(key, func(t *testing.T) {
			first, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
			require.NoError(t, err)
			require.NoError(t, s.SaveStep(ctx, store.SaveStepRequest{Key: key, Token: first.Token, Name: "charge", Value: []byte("ch_1"), Retention: time.Hour}))
			// The record expires as Redis drops it; its steps stay.
			require.NoError(t, c.Del(ctx, s.RedisKey(key)).Err())
			require.Equal(t, "ch_1", c.HGet(ctx, s.StepsKey(key), "charge").Val(), "the stale hash is there")
			staleTTL := c.PTTL(ctx, s.StepsKey(key)).Val()

			laterMillisecond(t, first.Record.CreatedAt)
			fresh, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
			require.NoError(t, err)
			require.True(t, fresh.Acquired)
			require.Equal(t, 1, fresh.Record.Attempt)
			steps, err := s.LoadSteps(ctx, store.StepsRequest{Key: key, Token: fresh.Token})
			require.NoError(t, err)
			require.Empty(t, steps, "LoadSteps of the fresh record")
			rec, err := s.Get(ctx, key)
			require.NoError(t, err)
			require.Empty(t, rec.Steps, "Get of the fresh record")
			for rec, err := range s.Scan(ctx, "orders:") {
				require.NoError(t, err)
				if rec.Key == key {
					require.Empty(t, rec.Steps, "Scan of the fresh record")
				}
			}
			require.NoError(t, s.Extend(ctx, store.ExtendRequest{Key: key, Token: fresh.Token, Lease: 10 * time.Hour}))
			require.LessOrEqual(t, c.PTTL(ctx, s.StepsKey(key)).Val(), staleTTL, "Extend of the fresh record does not keep the stale hash")

			require.NoError(t, s.SaveStep(ctx, store.SaveStepRequest{Key: key, Token: fresh.Token, Name: "reserve", Value: []byte("r_1"), Retention: time.Hour}))
			steps, err = s.LoadSteps(ctx, store.StepsRequest{Key: key, Token: fresh.Token})
			require.NoError(t, err)
			require.Equal(t, map[string]string{"reserve": "r_1"}, stepMap(steps), "the first SaveStep replaces the stale hash")
			require.False(t, c.HExists(ctx, s.StepsKey(key), "charge").Val())
		})
	}
}

// TestStepsKeyTTL: the steps key lives at least as long as its record
// plus the retention SaveStep was given, through SaveStep, Extend (longer
// or shorter), LoadSteps, Release and a takeover; none of them shortens
// it, Complete leaves it as it is, and a key without step records gets
// no steps key.
func TestStepsKeyTTL(t *testing.T) {
	c := redistest.Client(t)
	s := newStore(t, c, &redisstore.Options{AbandonedTTL: time.Hour})
	ctx := t.Context()
	const retention = 10 * time.Minute
	const slack = 5 * time.Second // the calls and reads of a loaded machine
	key := "ttl"
	rk, sk := s.RedisKey(key), s.StepsKey(key)
	pttl := func(k string) time.Duration {
		t.Helper()
		d, err := c.PTTL(ctx, k).Result()
		require.NoError(t, err)
		require.Positive(t, d, "%s has no expiry", k)
		return d
	}
	// atLeastRecord requires the steps key to outlive the record by the
	// retention, and returns its TTL.
	atLeastRecord := func(what string, plus time.Duration) time.Duration {
		t.Helper()
		rec, steps := pttl(rk), pttl(sk)
		require.GreaterOrEqual(t, steps, rec+plus-slack, "after %s: the steps key lives %v, the record %v", what, steps, rec)
		return steps
	}

	claim, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.Extend(ctx, store.ExtendRequest{Key: key, Token: claim.Token, Lease: 2 * time.Minute}))
	require.Zero(t, c.Exists(ctx, sk).Val(), "Extend of a key without step records makes no steps key")

	require.NoError(t, s.SaveStep(ctx, store.SaveStepRequest{Key: key, Token: claim.Token, Name: "charge", Value: []byte("a"), Retention: retention}))
	got := atLeastRecord("SaveStep", retention)
	require.Less(t, got, pttl(rk)+retention+slack, "SaveStep: the record's life plus the retention, not more")

	require.NoError(t, s.Extend(ctx, store.ExtendRequest{Key: key, Token: claim.Token, Lease: 3 * time.Hour}))
	longest := atLeastRecord("a longer Extend", retention)
	require.Greater(t, longest, 4*time.Hour)

	require.NoError(t, s.Extend(ctx, store.ExtendRequest{Key: key, Token: claim.Token, Lease: time.Second}))
	require.Greater(t, pttl(sk), longest-slack, "a shorter Extend does not shorten the steps key's life")
	_, err = s.LoadSteps(ctx, store.StepsRequest{Key: key, Token: claim.Token})
	require.NoError(t, err)
	require.Greater(t, pttl(sk), longest-slack, "LoadSteps does not shorten it")

	require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: key, Token: claim.Token, Error: "boom", Retention: 48 * time.Hour}))
	atLeastRecord("Release", retention)

	// A takeover of the failed key with a longer life than the steps key
	// has left: LoadSteps keeps them as long as the new record.
	require.NoError(t, c.PExpire(ctx, sk, time.Minute).Err())
	taken, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, taken.Acquired)
	steps, err := s.LoadSteps(ctx, store.StepsRequest{Key: key, Token: taken.Token})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"charge": "a"}, stepMap(steps))
	before := atLeastRecord("LoadSteps after a takeover", retention)

	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: key, Token: taken.Token, Result: []byte("ok"), Retention: time.Minute}))
	require.InDelta(t, float64(before), float64(pttl(sk)), float64(slack), "Complete leaves the steps key's expiry as it is")

	other := "nosteps"
	cl, err := s.Acquire(ctx, store.AcquireRequest{Key: other, Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: other, Token: cl.Token, Error: "boom", Retention: time.Hour}))
	require.Zero(t, c.Exists(ctx, s.StepsKey(other)).Val(), "Release of a key without step records makes no steps key")
}

// stepsKeySlots checks on a Cluster that the steps key of every sort of
// key, with and without hash tags of its own, is in its record key's slot
// (as CLUSTER KEYSLOT says, and as rediscore.Slot computes), and that
// every call that takes both keys, and the Inspector's, works on them
// (a wrong slot is a CROSSSLOT error).
func stepsKeySlots(t *testing.T, c *redis.ClusterClient, s *redisstore.Store) {
	ctx := t.Context()
	keys := []string{"orders:1", "orders:{42}:2", "{x}", "a}b", "{}c", "x{y", "}{z}", "é{ü}ß"}
	for i := range 200 {
		keys = append(keys, fmt.Sprintf("k%d", i), fmt.Sprintf("u{%d}", i))
	}
	for _, key := range keys {
		rs, err := c.ClusterKeySlot(ctx, s.RedisKey(key)).Result()
		require.NoError(t, err)
		ss, err := c.ClusterKeySlot(ctx, s.StepsKey(key)).Result()
		require.NoError(t, err)
		require.Equal(t, rs, ss, "key %q: the record key %q and the steps key %q", key, s.RedisKey(key), s.StepsKey(key))
		require.EqualValues(t, rs, rediscore.Slot(s.RedisKey(key)), "key %q", key)
	}
	var ext []store.ExtendRequest
	for _, key := range keys[:8] {
		claim, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
		require.NoError(t, err)
		require.True(t, claim.Acquired)
		require.NoError(t, s.SaveStep(ctx, store.SaveStepRequest{Key: key, Token: claim.Token, Name: "charge", Value: []byte(key), Retention: time.Hour}))
		steps, err := s.LoadSteps(ctx, store.StepsRequest{Key: key, Token: claim.Token})
		require.NoError(t, err)
		require.Equal(t, map[string]string{"charge": key}, stepMap(steps))
		require.NoError(t, s.Extend(ctx, store.ExtendRequest{Key: key, Token: claim.Token, Lease: time.Minute}))
		ext = append(ext, store.ExtendRequest{Key: key, Token: claim.Token, Lease: time.Minute})
	}
	for i, err := range s.ExtendBatch(ctx, ext) {
		require.NoError(t, err, ext[i].Key)
	}
	seen := 0
	for rec, err := range s.Scan(ctx, "") {
		require.NoError(t, err)
		require.Equal(t, map[string]string{"charge": rec.Key}, stepMap(rec.Steps), "Scan of %q", rec.Key)
		seen++
	}
	require.Equal(t, 8, seen)
	for i, r := range ext {
		rec, err := s.Get(ctx, r.Key)
		require.NoError(t, err)
		require.Equal(t, map[string]string{"charge": r.Key}, stepMap(rec.Steps))
		switch i % 3 {
		case 0:
			require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: r.Key, Token: r.Token, Error: "boom", Retention: time.Hour}))
			deleted, _, err := s.DeleteIf(ctx, store.DeleteRequest{Key: r.Key})
			require.NoError(t, err)
			require.True(t, deleted)
		case 1:
			require.NoError(t, s.Delete(ctx, r.Key))
		default:
			continue
		}
		require.Zero(t, c.Exists(ctx, s.StepsKey(r.Key)).Val(), "the steps of %q are deleted with the record", r.Key)
	}
}

// TestStepsDeletedWithRecord: Delete and DeleteIf delete the steps key
// with the record (not only leave it to be ignored by the next record);
// a DeleteIf that keeps the record keeps them.
func TestStepsDeletedWithRecord(t *testing.T) {
	c := redistest.Client(t)
	s := newStore(t, c, nil)
	ctx := t.Context()
	withSteps := func(key string) store.Claim {
		t.Helper()
		claim, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
		require.NoError(t, err)
		require.NoError(t, s.SaveStep(ctx, store.SaveStepRequest{Key: key, Token: claim.Token, Name: "charge", Retention: time.Hour}))
		require.EqualValues(t, 1, c.Exists(ctx, s.StepsKey(key)).Val())
		return claim
	}
	withSteps("deleted")
	require.NoError(t, s.Delete(ctx, "deleted"))
	require.Zero(t, c.Exists(ctx, s.RedisKey("deleted"), s.StepsKey("deleted")).Val(), "Delete")

	withSteps("kept")
	deleted, _, err := s.DeleteIf(ctx, store.DeleteRequest{Key: "kept"}) // processing: kept
	require.NoError(t, err)
	require.False(t, deleted)
	require.EqualValues(t, 2, c.Exists(ctx, s.RedisKey("kept"), s.StepsKey("kept")).Val(), "DeleteIf that keeps the record")
	deleted, _, err = s.DeleteIf(ctx, store.DeleteRequest{Key: "kept", States: []store.State{store.StateProcessing}})
	require.NoError(t, err)
	require.True(t, deleted)
	require.Zero(t, c.Exists(ctx, s.RedisKey("kept"), s.StepsKey("kept")).Val(), "DeleteIf")
}
