package storetest

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
)

// Harness is what the suite needs to drive one store.
type Harness struct {
	// Store is the store under test.
	Store dedup.Store

	// Advance moves the store's clock forward by d: a fake clock advances,
	// a store on real time (a server's clock) sleeps. Required.
	Advance func(d time.Duration)

	// Tick is the unit the suite builds leases and retentions from (a lease
	// is 10 ticks) and the tolerance of its time checks. A store on real
	// time sets it small, such as 20ms, to keep the suite fast, but not so
	// small that a round trip takes a good part of it. Defaults to
	// time.Second.
	Tick time.Duration

	// Now reads the store's clock. When set, the suite also checks
	// LeaseUntil and ExpiresAt against it, not only against each other.
	// Defaults to nil: relative checks only.
	Now func() time.Time
}

// Run runs the conformance suite against the stores newHarness returns.
//
// Every subtest calls newHarness once, so it may return a fresh store each
// time or share one: the suite isolates its subtests by a random key prefix
// and never flushes anything. Subtests run in parallel, so a shared store
// must not share a fake clock: one subtest's Advance would expire another's
// leases.
//
// Optional abilities (dedup.Peeker, dedup.BatchStore, dedup.Inspector) are
// found by type assertion; the subtests of an ability the store lacks skip.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Helper()
	for _, group := range groups {
		t.Run(group.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range group.cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.run(t, setup(t, newHarness))
				})
			}
		})
	}
}

// testCase is one rule of the contract.
type testCase struct {
	name string
	run  func(t *testing.T, f *fixture)
}

// groups lists the rules by topic; each topic lives in its own file.
var groups = []struct {
	name  string
	cases []testCase
}{
	{"Acquire", acquireCases},
	{"Lifecycle", lifecycleCases},
	{"Fingerprint", fingerprintCases},
	{"BadInput", badInputCases},
	{"Peeker", peekerCases},
	{"BatchStore", batchCases},
	{"Inspector", inspectorCases},
}

// fixture is one subtest's view of the store: its harness with defaults
// filled in, and a key prefix no other subtest uses.
type fixture struct {
	store   dedup.Store
	advance func(time.Duration)
	now     func() time.Time
	tick    time.Duration
	prefix  string
	ctx     context.Context
}

func setup(t *testing.T, newHarness func(t *testing.T) Harness) *fixture {
	t.Helper()
	h := newHarness(t)
	require.NotNil(t, h.Store, "storetest: Harness.Store is nil")
	require.NotNil(t, h.Advance, "storetest: Harness.Advance is nil")
	require.GreaterOrEqual(t, h.Tick, time.Duration(0), "storetest: Harness.Tick is negative")
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms.
	return &fixture{
		store:   h.Store,
		advance: h.Advance,
		now:     h.Now,
		tick:    cmp.Or(h.Tick, time.Second),
		prefix:  "storetest:" + hex.EncodeToString(b[:]) + ":",
		ctx:     t.Context(),
	}
}

// key returns the store key of name in this subtest.
func (f *fixture) key(name string) string { return f.prefix + name }

// lease is the lease of every claim unless a test says otherwise.
func (f *fixture) lease() time.Duration { return 10 * f.tick }

// retention is the retention of every record unless a test says otherwise.
func (f *fixture) retention() time.Duration { return 10 * f.tick }

func (f *fixture) failure(msg string) dedup.Failure {
	return dedup.Failure{Error: msg, Retention: f.retention()}
}

// acquire calls Acquire with the default lease and requires no error.
func (f *fixture) acquire(t *testing.T, key, fingerprint string) dedup.Claim {
	t.Helper()
	c, err := f.store.Acquire(f.ctx, key, dedup.AcquireRequest{Lease: f.lease(), Fingerprint: fingerprint})
	require.NoError(t, err, "Acquire(%q)", key)
	return c
}

// claim acquires key and requires that the caller now holds it.
func (f *fixture) claim(t *testing.T, key string) dedup.Claim {
	t.Helper()
	c := f.acquire(t, key, "")
	require.True(t, c.Acquired, "Acquire(%q) should claim the key; got a %s record", key, c.Record.State)
	require.False(t, c.Token.IsZero(), "an acquired claim needs a token")
	require.Equal(t, dedup.StateProcessing, c.Record.State)
	return c
}

// requireHeld requires that another Acquire of key finds it processing, and
// returns the record it saw.
func (f *fixture) requireHeld(t *testing.T, key string, attempt int) dedup.Record {
	t.Helper()
	c := f.acquire(t, key, "")
	require.False(t, c.Acquired, "Acquire(%q) claimed a key that should still be held", key)
	require.True(t, c.Token.IsZero(), "a claim that is not acquired has no token")
	require.Equal(t, dedup.StateProcessing, c.Record.State)
	require.Equal(t, attempt, c.Record.Attempt)
	return c.Record
}

// requireCompleted requires that another Acquire of key replays result, and
// returns the record it saw.
func (f *fixture) requireCompleted(t *testing.T, key string, result []byte) dedup.Record {
	t.Helper()
	c := f.acquire(t, key, "")
	require.False(t, c.Acquired, "Acquire(%q) claimed a completed key", key)
	require.True(t, c.Token.IsZero(), "a claim that is not acquired has no token")
	require.Equal(t, dedup.StateCompleted, c.Record.State)
	requireBytes(t, result, c.Record.Result)
	return c.Record
}

// complete calls Complete with the default retention and requires success.
func (f *fixture) complete(t *testing.T, key string, token dedup.Token, result []byte) {
	t.Helper()
	require.NoError(t, f.store.Complete(f.ctx, key, token, result, f.retention()), "Complete(%q)", key)
}

// release calls Release with the default retention and requires success.
func (f *fixture) release(t *testing.T, key string, token dedup.Token, msg string) {
	t.Helper()
	require.NoError(t, f.store.Release(f.ctx, key, token, f.failure(msg)), "Release(%q)", key)
}

// requireLeaseLost requires that err matches dedup.ErrLeaseLost.
func requireLeaseLost(t *testing.T, err error, op string) {
	t.Helper()
	require.ErrorIs(t, err, dedup.ErrLeaseLost, "%s should fail with ErrLeaseLost", op)
}

// requireBytes compares results, treating nil and empty as equal: a store
// need not tell them apart.
func requireBytes(t *testing.T, want, got []byte) {
	t.Helper()
	if len(want) == 0 {
		require.Empty(t, got)
		return
	}
	require.Equal(t, string(want), string(got))
}

// requireAbout requires that got is want within the fixture's tolerance.
func (f *fixture) requireAbout(t *testing.T, want, got time.Time, what string) {
	t.Helper()
	require.WithinDuration(t, want, got, f.tick, "%s", what)
}

// requireFromNow requires that got is about d after the store's clock reads
// now, when the harness can read that clock.
func (f *fixture) requireFromNow(t *testing.T, d time.Duration, got time.Time, what string) {
	t.Helper()
	if f.now == nil {
		return
	}
	f.requireAbout(t, f.now().Add(d), got, what)
}

// staleToken returns a token no store has handed out.
func staleToken() dedup.Token { return dedup.NewToken() }
