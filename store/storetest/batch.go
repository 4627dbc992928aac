package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
)

// batchCases pin dedup.BatchStore: every item's outcome is what the
// single-key method would have returned, in order, items of one batch
// seeing the items before them.
var batchCases = []testCase{
	{"AcquireMatchesSingle", testAcquireBatchMatchesSingle},
	{"Complete", testCompleteBatch},
	{"Empty", testBatchEmpty},
	{"CanceledContext", testBatchCanceled},
}

func (f *fixture) batchStore(t *testing.T) dedup.BatchStore {
	t.Helper()
	b, ok := f.store.(dedup.BatchStore)
	if !ok {
		t.Skip("the store does not implement dedup.BatchStore")
	}
	return b
}

// sentinels are the errors whose matching must not differ between a batch
// and single-key calls.
var sentinels = []error{
	dedup.ErrKeyReused, dedup.ErrLeaseLost, dedup.ErrInvalidKey, dedup.ErrInvalidConfig,
	dedup.ErrStoreUnavailable, context.Canceled,
}

func testAcquireBatchMatchesSingle(t *testing.T, f *fixture) {
	b := f.batchStore(t)

	// Two identical worlds: one answers AcquireBatch, the other single
	// Acquires of the same items in the same order.
	world := func(name string) func(string) string {
		k := func(n string) string { return f.key(name + ":" + n) }
		held := f.acquire(t, k("held"), "payload-a")
		require.True(t, held.Acquired)
		done := f.acquire(t, k("done"), "payload-a")
		require.True(t, done.Acquired)
		f.complete(t, k("done"), done.Token, []byte("done"))
		f.release(t, k("failed"), f.claim(t, k("failed")).Token, "boom")
		return k
	}
	items := func(k func(string) string) []dedup.AcquireItem {
		req := dedup.AcquireRequest{Lease: f.lease()}
		return []dedup.AcquireItem{
			{Key: k("fresh"), Request: req},
			{Key: k("fresh"), Request: req},
			{Key: k("held"), Request: req},
			{Key: k("done"), Request: req},
			{Key: k("failed"), Request: req},
			{Key: k("failed"), Request: req},
			{Key: k("held"), Request: dedup.AcquireRequest{Lease: f.lease(), Fingerprint: "payload-b"}},
			{Key: k("done"), Request: dedup.AcquireRequest{Lease: f.lease(), Fingerprint: "payload-b"}},
			{Key: k("done"), Request: dedup.AcquireRequest{Lease: f.lease(), Fingerprint: "payload-a"}},
			{Key: "", Request: req},
			{Key: k("bad-lease"), Request: dedup.AcquireRequest{}},
			{Key: k("bad-lease"), Request: req},
		}
	}
	batchKey, singleKey := world("batch"), world("single")

	got := b.AcquireBatch(f.ctx, items(batchKey))
	singleItems := items(singleKey)
	require.Len(t, got, len(singleItems), "AcquireBatch returns one outcome per item")
	for i, it := range singleItems {
		c, err := f.store.Acquire(f.ctx, it.Key, it.Request)
		f.requireSameOutcome(t, i, dedup.AcquireOutcome{Claim: c, Err: err}, got[i], f.key("single:"), f.key("batch:"))
	}

	// The comparison alone would pass two equally wrong stores; pin the
	// outcomes that matter too.
	require.True(t, got[0].Claim.Acquired, "the first item of a fresh key claims it")
	require.False(t, got[1].Claim.Acquired, "the second item of the same key sees the first one's claim")
	require.Equal(t, dedup.StateProcessing, got[1].Claim.Record.State)
	require.Equal(t, 1, got[1].Claim.Record.Attempt)
	require.Equal(t, dedup.StateCompleted, got[3].Claim.Record.State)
	require.True(t, got[4].Claim.Acquired, "a failed key is claimed again")
	require.Equal(t, 2, got[4].Claim.Record.Attempt)
	require.False(t, got[5].Claim.Acquired)
	require.ErrorIs(t, got[6].Err, dedup.ErrKeyReused)
	require.ErrorIs(t, got[7].Err, dedup.ErrKeyReused)
	require.NoError(t, got[8].Err)
	require.Error(t, got[9].Err, "an empty key fails its item")
	require.Error(t, got[10].Err, "a zero lease fails its item")
	require.True(t, got[11].Claim.Acquired, "a failed item claims nothing")
}

// requireSameOutcome requires that a batch item's outcome equals the
// single-key call's, keys compared without their world's prefix.
func (f *fixture) requireSameOutcome(t *testing.T, i int, want, got dedup.AcquireOutcome, wantPrefix, gotPrefix string) {
	t.Helper()
	require.Equal(t, want.Err == nil, got.Err == nil, "item %d: the batch gave error %v, Acquire gave %v", i, got.Err, want.Err)
	for _, s := range sentinels {
		require.Equal(t, errors.Is(want.Err, s), errors.Is(got.Err, s), "item %d: the batch gave error %v, Acquire gave %v", i, got.Err, want.Err)
	}
	require.Equal(t, want.Claim.Acquired, got.Claim.Acquired, "item %d: Acquired", i)
	require.Equal(t, want.Claim.Token.IsZero(), got.Claim.Token.IsZero(), "item %d: token", i)
	w, g := want.Claim.Record, got.Claim.Record
	require.Equal(t, strings.TrimPrefix(w.Key, wantPrefix), strings.TrimPrefix(g.Key, gotPrefix), "item %d: Key", i)
	require.Equal(t, w.State, g.State, "item %d: State", i)
	require.Equal(t, w.Attempt, g.Attempt, "item %d: Attempt", i)
	require.Equal(t, w.Fingerprint, g.Fingerprint, "item %d: Fingerprint", i)
	require.Equal(t, string(w.Result), string(g.Result), "item %d: Result", i)
	require.Equal(t, w.LastError, g.LastError, "item %d: LastError", i)
	f.requireAbout(t, w.LeaseUntil, g.LeaseUntil, "LeaseUntil")
	f.requireAbout(t, w.ExpiresAt, g.ExpiresAt, "ExpiresAt")
}

func testCompleteBatch(t *testing.T, f *fixture) {
	b := f.batchStore(t)
	k1, k2, k3, k4 := f.key("one"), f.key("two"), f.key("three"), f.key("four")

	// k2's first token goes stale: its lease expires and another claim
	// takes the key over.
	stale := f.claim(t, k2).Token
	f.advance(f.lease() + f.tick)
	fresh := f.claim(t, k2).Token
	t1, t3, t4 := f.claim(t, k1).Token, f.claim(t, k3).Token, f.claim(t, k4).Token

	errs := b.CompleteBatch(f.ctx, []dedup.CompleteItem{
		{Key: k1, Token: t1, Result: []byte("r1"), Retention: f.retention()},
		{Key: k2, Token: stale, Result: []byte("stale"), Retention: f.retention()},
		{Key: k3, Token: t3, Result: []byte("r3"), Retention: f.retention()},
		{Key: k1, Token: t1, Result: []byte("again"), Retention: f.retention()},
		{Key: k4, Token: t4, Result: []byte("r4"), Retention: 0},
	})
	require.Len(t, errs, 5, "CompleteBatch returns one error per item")
	require.NoError(t, errs[0])
	requireLeaseLost(t, errs[1], "a batch item with a stale token")
	require.NoError(t, errs[2])
	requireLeaseLost(t, errs[3], "a batch item completing a key an earlier item completed")
	require.Error(t, errs[4], "a batch item with a zero retention")
	require.NotErrorIs(t, errs[4], dedup.ErrLeaseLost)

	f.requireCompleted(t, k1, []byte("r1"))
	f.requireCompleted(t, k3, []byte("r3"))
	f.requireHeld(t, k2, 2)
	f.requireHeld(t, k4, 1)
	f.complete(t, k2, fresh, []byte("r2"))
	f.complete(t, k4, t4, []byte("r4"))
	f.requireCompleted(t, k2, []byte("r2"))
}

func testBatchEmpty(t *testing.T, f *fixture) {
	b := f.batchStore(t)
	require.Empty(t, b.AcquireBatch(f.ctx, nil))
	require.Empty(t, b.CompleteBatch(f.ctx, nil))
}

func testBatchCanceled(t *testing.T, f *fixture) {
	b := f.batchStore(t)
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	k1, k2 := f.key("one"), f.key("two")

	outs := b.AcquireBatch(ctx, []dedup.AcquireItem{
		{Key: k1, Request: dedup.AcquireRequest{Lease: f.lease()}},
		{Key: k2, Request: dedup.AcquireRequest{Lease: f.lease()}},
	})
	require.Len(t, outs, 2)
	for i, o := range outs {
		require.ErrorIs(t, o.Err, context.Canceled, "item %d", i)
		require.False(t, o.Claim.Acquired, "item %d", i)
	}

	c1, c2 := f.claim(t, k1), f.claim(t, k2)
	require.Equal(t, 1, c1.Record.Attempt, "the canceled batch must claim nothing")
	errs := b.CompleteBatch(ctx, []dedup.CompleteItem{
		{Key: k1, Token: c1.Token, Result: []byte("x"), Retention: f.retention()},
		{Key: k2, Token: c2.Token, Result: []byte("x"), Retention: f.retention()},
	})
	require.Len(t, errs, 2)
	for i, err := range errs {
		require.ErrorIs(t, err, context.Canceled, "item %d", i)
	}
	f.requireHeld(t, k1, 1)
	f.requireHeld(t, k2, 1)
}
