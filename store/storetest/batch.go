package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
)

// batchCases pin store.BatchStore: every request's outcome is what the
// single-key method would have returned, in order, requests of one batch
// seeing the requests before them.
var batchCases = []testCase{
	{"AcquireMatchesSingle", testAcquireBatchMatchesSingle},
	{"Complete", testCompleteBatch},
	{"CompleteTwice", testCompleteBatchTwice},
	{"ExtendMatchesSingle", testExtendBatchMatchesSingle},
	{"Extend", testExtendBatch},
	{"Empty", testBatchEmpty},
	{"CanceledContext", testBatchCanceled},
}

func (f *fixture) batchStore(t *testing.T) store.BatchStore {
	t.Helper()
	b, ok := f.store.(store.BatchStore)
	if !ok {
		t.Skip("the store does not implement store.BatchStore")
	}
	return b
}

// sentinels are the errors whose matching must not differ between a batch
// and single-key calls.
var sentinels = []error{
	store.ErrKeyReused, store.ErrLeaseLost, store.ErrInvalidKey, store.ErrInvalidConfig,
	store.ErrUnavailable, context.Canceled,
}

// sameError reports how the error of a batch request differs from the
// single-key call's, or "" when it does not.
func sameError(want, got error) string {
	if (want == nil) != (got == nil) {
		return fmt.Sprintf("the batch gave error %v, the single call %v", got, want)
	}
	for _, s := range sentinels {
		if errors.Is(want, s) != errors.Is(got, s) {
			return fmt.Sprintf("the batch gave error %v, the single call %v", got, want)
		}
	}
	return ""
}

// earliestDeadline returns the earliest noted deadline of keys, or zero
// when one of them is unknown.
func (f *fixture) earliestDeadline(keys ...string) time.Time {
	var first time.Time
	for _, key := range keys {
		d, ok := f.deadlines[key]
		if !ok {
			continue
		}
		if d.IsZero() {
			return time.Time{}
		}
		if first.IsZero() || d.Before(first) {
			first = d
		}
	}
	return first
}

func testAcquireBatchMatchesSingle(t *testing.T, f *fixture) {
	b := f.batchStore(t)

	// Two identical worlds: one answers AcquireBatch, the other single
	// Acquires of the same requests in the same order.
	var worldKeys []string
	world := func(name string) func(string) string {
		k := func(n string) string { return f.key(name + ":" + n) }
		held := f.acquire(t, k("held"), "payload-a")
		require.True(t, held.Acquired)
		done := f.acquire(t, k("done"), "payload-a")
		require.True(t, done.Acquired)
		f.complete(t, k("done"), done.Token, []byte("done"))
		f.release(t, k("failed"), f.claim(t, k("failed")).Token, "boom")
		worldKeys = append(worldKeys, k("held"), k("done"), k("failed"))
		return k
	}
	requests := func(k func(string) string) []store.AcquireRequest {
		req := func(key, fingerprint string) store.AcquireRequest {
			return store.AcquireRequest{Key: key, Lease: f.lease(), Fingerprint: fingerprint}
		}
		return []store.AcquireRequest{
			req(k("fresh"), ""),
			req(k("fresh"), ""),
			req(k("held"), ""),
			req(k("done"), ""),
			req(k("failed"), ""),
			req(k("failed"), ""),
			req(k("held"), "payload-b"),
			req(k("done"), "payload-b"),
			req(k("done"), "payload-a"),
			req("", ""),
			{Key: k("bad-lease")},
			req(k("bad-lease"), ""),
		}
	}
	batchKey, singleKey := world("batch"), world("single")

	var got []store.AcquireOutcome
	w := f.during(func() { got = b.AcquireBatch(f.ctx, requests(batchKey)) })
	single := requests(singleKey)
	require.Len(t, got, len(single), "AcquireBatch returns one outcome per request")
	want := make([]store.AcquireOutcome, len(single))
	for i, req := range single {
		want[i].Claim, want[i].Err = f.store.Acquire(f.ctx, req)
	}
	// A world's leases and retentions last 10 ticks: a difference is only
	// the store's fault while none has ended.
	deadline := f.earliestDeadline(worldKeys...)
	for i := range single {
		if diff := sameOutcome(want[i], got[i], f.key("single:"), f.key("batch:")); diff != "" {
			f.failOnTime(t, deadline, "request %d: %s", i, diff)
		}
		if got[i].Claim.Acquired {
			w.requireAt(t, f.lease(), got[i].Claim.Record.LeaseUntil, fmt.Sprintf("LeaseUntil of the claim of request %d", i))
		}
	}

	// The comparison alone would pass two equally wrong stores; pin the
	// outcomes that matter too.
	deadline = earlier(deadline, got[0].Claim.Record.LeaseUntil)
	for _, c := range []struct {
		ok   bool
		what string
	}{
		{got[0].Claim.Acquired, "the first request of a fresh key claims it"},
		{!got[1].Claim.Acquired && got[1].Claim.Record.State == store.StateProcessing && got[1].Claim.Record.Attempt == 1,
			"the second request of the same key sees the first one's claim"},
		{got[3].Claim.Record.State == store.StateCompleted, "a completed key is replayed"},
		{got[4].Claim.Acquired && got[4].Claim.Record.Attempt == 2, "a failed key is claimed again, with attempt 2"},
		{!got[5].Claim.Acquired, "the second request of a failed key sees the first one's claim"},
		{errors.Is(got[6].Err, store.ErrKeyReused), "another fingerprint for a held key is ErrKeyReused"},
		{errors.Is(got[7].Err, store.ErrKeyReused), "another fingerprint for a completed key is ErrKeyReused"},
		{got[8].Err == nil, "the same fingerprint for a completed key is replayed"},
		{errors.Is(got[9].Err, store.ErrInvalidKey), "an empty key fails its request with ErrInvalidKey"},
		{errors.Is(got[10].Err, store.ErrInvalidConfig), "a zero lease fails its request with ErrInvalidConfig"},
		{got[11].Claim.Acquired, "a failed request claims nothing"},
	} {
		f.expect(t, c.ok, deadline, "AcquireBatch: %s", c.what)
	}
}

// sameOutcome reports how a batch request's outcome differs from the
// single-key call's, keys compared without their world's prefix, or ""
// when it does not. Times are set by two calls at two moments: only
// whether they are set must agree.
func sameOutcome(want, got store.AcquireOutcome, wantPrefix, gotPrefix string) string {
	if diff := sameError(want.Err, got.Err); diff != "" {
		return diff
	}
	w, g := want.Claim.Record, got.Claim.Record
	for _, d := range []struct {
		what      string
		want, got any
	}{
		{"Acquired", want.Claim.Acquired, got.Claim.Acquired},
		{"a zero token", want.Claim.Token.IsZero(), got.Claim.Token.IsZero()},
		{"Key", strings.TrimPrefix(w.Key, wantPrefix), strings.TrimPrefix(g.Key, gotPrefix)},
		{"State", w.State, g.State},
		{"Attempt", w.Attempt, g.Attempt},
		{"Fingerprint", w.Fingerprint, g.Fingerprint},
		{"Result", string(w.Result), string(g.Result)},
		{"LastError", w.LastError, g.LastError},
		{"a zero LeaseUntil", w.LeaseUntil.IsZero(), g.LeaseUntil.IsZero()},
		{"a zero ExpiresAt", w.ExpiresAt.IsZero(), g.ExpiresAt.IsZero()},
	} {
		if d.want != d.got {
			return fmt.Sprintf("%s: the batch gave %v, the single call %v", d.what, d.got, d.want)
		}
	}
	return ""
}

func testCompleteBatch(t *testing.T, f *fixture) {
	b := f.batchStore(t)
	k1, k2, k3, k4 := f.key("one"), f.key("two"), f.key("three"), f.key("four")

	// k2's first token goes stale: its lease expires and another claim
	// takes the key over.
	stale := f.claim(t, k2).Token
	f.advance(f.lease())
	fresh := f.claim(t, k2).Token
	t1, t3, t4 := f.claim(t, k1).Token, f.claim(t, k3).Token, f.claim(t, k4).Token

	errs := b.CompleteBatch(f.ctx, []store.CompleteRequest{
		f.completeRequest(k1, t1, "r1"),
		f.completeRequest(k2, stale, "stale"),
		f.completeRequest(k3, t3, "r3"),
		f.completeRequest(k1, t1, "again"),
		{Key: k4, Token: t4, Result: []byte("r4"), Retention: 0},
	})
	require.Len(t, errs, 5, "CompleteBatch returns one error per request")
	f.requireNoLoss(t, k1, errs[0], "CompleteBatch")
	requireLeaseLost(t, errs[1], "a batch request with a stale token")
	f.requireNoLoss(t, k3, errs[2], "CompleteBatch")
	require.NoError(t, errs[3], "a batch request completing again with the token an earlier request completed with")
	require.ErrorIs(t, errs[4], store.ErrInvalidConfig, "a batch request with a zero retention")

	f.requireCompleted(t, k1, []byte("r1"))
	f.requireCompleted(t, k3, []byte("r3"))
	f.requireHeld(t, k2, 2)
	f.requireHeld(t, k4, 1)
	f.complete(t, k2, fresh, []byte("r2"))
	f.complete(t, k4, t4, []byte("r4"))
	f.requireCompleted(t, k2, []byte("r2"))
}

func testCompleteBatchTwice(t *testing.T, f *fixture) {
	b := f.batchStore(t)
	key := f.key("twice")
	c := f.claim(t, key)
	f.complete(t, key, c.Token, []byte("first"))
	first := f.requireCompleted(t, key, []byte("first"))

	errs := b.CompleteBatch(f.ctx, []store.CompleteRequest{
		{Key: key, Token: c.Token, Result: []byte("second"), Retention: 3 * f.retention()},
		f.completeRequest(key, staleToken(), "third"),
	})
	require.Len(t, errs, 2)
	f.expectKept(t, key, errs[0] == nil, "CompleteBatch with the token that completed the record: %v", errs[0])
	requireLeaseLost(t, errs[1], "CompleteBatch of a completed key with another token")
	again := f.requireCompleted(t, key, []byte("first"))
	requireSameTime(t, first.ExpiresAt, again.ExpiresAt, "completing again must not move ExpiresAt")
}

// extendWorld holds a world of keys for ExtendBatch: held ones with their
// tokens, and a completed one.
type extendWorld struct {
	k      func(string) string
	tokens map[string]store.Token
}

func (f *fixture) extendWorld(t *testing.T, name string) extendWorld {
	t.Helper()
	w := extendWorld{k: func(n string) string { return f.key(name + ":" + n) }, tokens: map[string]store.Token{}}
	for _, n := range []string{"held", "held-stale", "held-bad", "held-zero"} {
		w.tokens[n] = f.claim(t, w.k(n)).Token
	}
	w.tokens["done"] = f.claim(t, w.k("done")).Token
	f.complete(t, w.k("done"), w.tokens["done"], []byte("done"))
	return w
}

func (w extendWorld) keys() []string {
	var keys []string
	for n := range w.tokens {
		keys = append(keys, w.k(n))
	}
	return keys
}

func (w extendWorld) requests(f *fixture) []store.ExtendRequest {
	var zero store.Token
	return []store.ExtendRequest{
		{Key: w.k("held"), Token: w.tokens["held"], Lease: 2 * f.lease()},
		{Key: w.k("held-stale"), Token: staleToken(), Lease: f.lease()},
		{Key: "", Token: w.tokens["held"], Lease: f.lease()},
		{Key: w.k("held-bad"), Token: w.tokens["held-bad"], Lease: 0},
		{Key: w.k("absent"), Token: staleToken(), Lease: f.lease()},
		{Key: w.k("done"), Token: w.tokens["done"], Lease: f.lease()},
		{Key: w.k("held-zero"), Token: zero, Lease: f.lease()},
		{Key: w.k("held"), Token: w.tokens["held"], Lease: 3 * f.lease()},
	}
}

func testExtendBatchMatchesSingle(t *testing.T, f *fixture) {
	b := f.batchStore(t)
	batchWorld, singleWorld := f.extendWorld(t, "batch"), f.extendWorld(t, "single")

	var got []error
	w := f.during(func() { got = b.ExtendBatch(f.ctx, batchWorld.requests(f)) })
	single := singleWorld.requests(f)
	require.Len(t, got, len(single), "ExtendBatch returns one error per request")
	deadline := f.earliestDeadline(append(batchWorld.keys(), singleWorld.keys()...)...)
	for i, req := range single {
		if diff := sameError(f.store.Extend(f.ctx, req), got[i]); diff != "" {
			f.failOnTime(t, deadline, "request %d: %s", i, diff)
		}
	}

	f.requireNoLoss(t, batchWorld.k("held"), got[0], "ExtendBatch")
	requireLeaseLost(t, got[1], "a stale token")
	require.ErrorIs(t, got[2], store.ErrInvalidKey, "an empty key")
	require.ErrorIs(t, got[3], store.ErrInvalidConfig, "a zero lease")
	requireLeaseLost(t, got[4], "an absent key")
	requireLeaseLost(t, got[5], "a completed key")
	requireLeaseLost(t, got[6], "the zero token")
	f.requireNoLoss(t, batchWorld.k("held"), got[7], "ExtendBatch")

	// The last extension of a key is the one that holds.
	f.note(batchWorld.k("held"), w.earliest(3*f.lease()))
	rec := f.requireHeld(t, batchWorld.k("held"), 1)
	w.requireAt(t, 3*f.lease(), rec.LeaseUntil, "LeaseUntil after ExtendBatch")
	f.requireCompleted(t, batchWorld.k("done"), []byte("done"))
}

func testExtendBatch(t *testing.T, f *fixture) {
	b := f.batchStore(t)
	k1, k2 := f.key("one"), f.key("two")
	c1, c2 := f.claim(t, k1), f.claim(t, k2)
	f.advance(5 * f.tick)

	// k1 is extended past its first lease, k2 to an earlier deadline; both
	// then end where the batch set them.
	var errs []error
	w := f.during(func() {
		errs = b.ExtendBatch(f.ctx, []store.ExtendRequest{
			{Key: k1, Token: c1.Token, Lease: 4 * f.lease()},
			{Key: k2, Token: c2.Token, Lease: f.tick},
		})
	})
	require.Len(t, errs, 2)
	f.requireNoLoss(t, k1, errs[0], "ExtendBatch")
	f.requireNoLoss(t, k2, errs[1], "ExtendBatch")
	f.note(k1, w.earliest(4*f.lease()))
	rec := f.requireHeld(t, k1, 1)
	w.requireAt(t, 4*f.lease(), rec.LeaseUntil, "LeaseUntil of a key extended by ExtendBatch")

	f.advance(f.tick) // past k2's shortened lease, within its first one
	taken := f.acquire(t, k2, "")
	require.True(t, taken.Acquired, "ExtendBatch set an earlier deadline, which has passed")
	require.Equal(t, 2, taken.Record.Attempt)

	f.advance(f.lease()) // past k1's first lease, within its extended one
	f.requireHeld(t, k1, 1)
}

func testBatchEmpty(t *testing.T, f *fixture) {
	b := f.batchStore(t)
	require.Empty(t, b.AcquireBatch(f.ctx, nil))
	require.Empty(t, b.CompleteBatch(f.ctx, nil))
	require.Empty(t, b.ExtendBatch(f.ctx, nil))
	require.Empty(t, b.ExtendBatch(f.ctx, []store.ExtendRequest{}))
}

func testBatchCanceled(t *testing.T, f *fixture) {
	b := f.batchStore(t)
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	k1, k2 := f.key("one"), f.key("two")

	outs := b.AcquireBatch(ctx, []store.AcquireRequest{
		{Key: k1, Lease: f.lease()},
		{Key: k2, Lease: f.lease()},
	})
	require.Len(t, outs, 2)
	for i, o := range outs {
		require.ErrorIs(t, o.Err, context.Canceled, "request %d", i)
		require.False(t, o.Claim.Acquired, "request %d", i)
	}

	c1, c2 := f.claim(t, k1), f.claim(t, k2)
	require.Equal(t, 1, c1.Record.Attempt, "the canceled batch must claim nothing")
	errs := b.CompleteBatch(ctx, []store.CompleteRequest{
		f.completeRequest(k1, c1.Token, "x"),
		f.completeRequest(k2, c2.Token, "x"),
	})
	require.Len(t, errs, 2)
	for i, err := range errs {
		require.ErrorIs(t, err, context.Canceled, "request %d", i)
	}

	errs = b.ExtendBatch(ctx, []store.ExtendRequest{
		{Key: k1, Token: c1.Token, Lease: 10 * f.lease()},
		{Key: k2, Token: c2.Token, Lease: f.tick},
	})
	require.Len(t, errs, 2)
	for i, err := range errs {
		require.ErrorIs(t, err, context.Canceled, "request %d", i)
	}

	// The canceled batches changed nothing.
	rec := f.requireHeld(t, k1, 1)
	requireSameTime(t, c1.Record.LeaseUntil, rec.LeaseUntil, "a canceled ExtendBatch must not move a lease")
	rec = f.requireHeld(t, k2, 1)
	requireSameTime(t, c2.Record.LeaseUntil, rec.LeaseUntil, "a canceled ExtendBatch must not move a lease")
}
