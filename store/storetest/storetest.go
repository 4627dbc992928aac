package storetest

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
)

// Harness is what the suite needs to drive one store.
type Harness struct {
	// Store is the store under test.
	Store store.Store

	// Advance moves the store's clock forward by d: a fake clock advances,
	// a store on real time (a server's clock) sleeps. Required.
	Advance func(d time.Duration)

	// Tick is the unit the suite builds leases and retentions from (a lease
	// is 10 ticks). A store on real time sets it small, such as 20ms, to
	// keep the suite fast, but not so small that a round trip takes a good
	// part of it. Defaults to time.Second.
	Tick time.Duration

	// Now reads the store's clock. When set, the suite checks every
	// LeaseUntil and ExpiresAt against readings taken before and after the
	// call that set it, and tells a machine too slow for a check (the
	// store's clock passed a deadline before the check could run: the
	// subtest runs again with a longer Tick, and skips when it stays
	// inconclusive, or fails under DEDUP_TEST_REQUIRE=1) from a store that
	// broke a rule (the subtest fails). Defaults to nil: only the order of
	// times is checked, and a store on real time may then fail a check on a
	// machine too busy to run it within Tick.
	Now func() time.Time

	// Resolution is the granularity of the times the store keeps: the
	// suite truncates its reading of Now before a call to it, so a store
	// that keeps milliseconds (a server's clock read in a script) passes.
	// Defaults to time.Millisecond.
	Resolution time.Duration

	// Omits names the fields of store.Record that the store's Inspector
	// does not keep (FieldToken, FieldCreatedAt, FieldCompletedAt, or'ed
	// together): the suite then requires them zero in its answers instead
	// of pinning their values. A store that keeps a field must not say it
	// omits it. Defaults to none: every field is kept.
	Omits Fields
}

// Run runs the conformance suite against the stores newHarness returns.
//
// Every subtest calls newHarness once, so it may return a fresh store each
// time or share one: the suite isolates its subtests by a random key prefix
// and never flushes anything. Subtests run in parallel, so a shared store
// must not share a fake clock: one subtest's Advance would expire another's
// leases.
//
// Optional abilities (store.Peeker, store.BatchStore, store.Inspector,
// store.CompleteReporter) are found by type assertion; the subtests of an
// ability the store lacks skip.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Helper()
	for _, group := range groups {
		t.Run(group.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range group.cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					runCase(t, c, newHarness)
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
	{"OwnToken", ownTokenCases},
	{"Lifecycle", lifecycleCases},
	{"Deadlines", deadlineCases},
	{"Fencing", fencingCases},
	{"Fingerprint", fingerprintCases},
	{"BadInput", badInputCases},
	{"Peeker", peekerCases},
	{"BatchStore", batchCases},
	{"Inspector", inspectorCases},
	{"DeleteIf", deleteIfCases},
	{"CompleteReporter", reporterCases},
	{"RecordFields", recordFieldCases},
	{"Steps", stepCases},
}

// attempts is how many times a subtest runs while it is inconclusive (see
// failOnTime), each time with a Tick four times longer: the last one uses
// 16 times the harness's Tick.
const attempts = 3

// inconclusive is what failOnTime panics with when a check failed after
// the store's clock passed the deadline it depends on; runCase recovers it.
type inconclusive struct{ msg string }

// runCase runs c on a fresh fixture, and again with a longer Tick while it
// is inconclusive: the machine was too slow to check a rule before the
// deadline it depends on. When the last attempt is inconclusive too, the
// subtest skips, or fails under DEDUP_TEST_REQUIRE=1 (what CI sets), so
// that a conformance check never goes unrun there.
func runCase(t *testing.T, c testCase, newHarness func(t *testing.T) Harness) {
	t.Helper()
	var tick time.Duration
	for i := range attempts {
		f := setup(t, newHarness)
		f.tick <<= 2 * i
		tick = f.tick
		inc, done := f.try(t, c.run)
		if done {
			return
		}
		t.Logf("storetest: attempt %d of %d with a Tick of %v is inconclusive: %s", i+1, attempts, tick, inc.msg)
	}
	msg := fmt.Sprintf("storetest: inconclusive %d times, the last with a Tick of %v: the machine is too slow to check this rule in time", attempts, tick)
	if testenv.Required() {
		t.Fatalf("%s; DEDUP_TEST_REQUIRE=1, so this fails instead of skipping", msg)
	}
	t.Skip(msg)
}

// try runs run on f and reports whether it ended (passed, failed or
// skipped) rather than turned out inconclusive.
func (f *fixture) try(t *testing.T, run func(t *testing.T, f *fixture)) (inc inconclusive, done bool) {
	defer func() {
		if done {
			return
		}
		r := recover()
		if r == nil {
			return // t.FailNow or t.SkipNow: the subtest ends
		}
		i, ok := r.(inconclusive)
		if !ok {
			panic(r)
		}
		inc = i
	}()
	run(t, f)
	return inconclusive{}, true
}

// fixture is one subtest's view of the store: its harness with defaults
// filled in, a key prefix no other subtest uses, and the deadlines of the
// records it made. Only the subtest's own goroutine uses it.
type fixture struct {
	store      store.Store
	advance    func(time.Duration)
	now        func() time.Time
	tick       time.Duration
	resolution time.Duration
	omits      Fields
	prefix     string
	ctx        context.Context
	// deadlines holds, per key, the earliest time the store's clock may
	// end the record's current state (its lease or its retention), when
	// the harness reads that clock. A check that the state still holds
	// skips rather than fails once the clock has passed it.
	deadlines map[string]time.Time
	// previous holds, per key, the deadline noted before the last Acquire
	// that claimed the key: the end of the state that claim replaced, which
	// an attempt count depends on.
	previous map[string]time.Time
}

func setup(t *testing.T, newHarness func(t *testing.T) Harness) *fixture {
	t.Helper()
	h := newHarness(t)
	require.NotNil(t, h.Store, "storetest: Harness.Store is nil")
	require.NotNil(t, h.Advance, "storetest: Harness.Advance is nil")
	require.GreaterOrEqual(t, h.Tick, time.Duration(0), "storetest: Harness.Tick is negative")
	require.GreaterOrEqual(t, h.Resolution, time.Duration(0), "storetest: Harness.Resolution is negative")
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms.
	return &fixture{
		store:      h.Store,
		advance:    h.Advance,
		now:        h.Now,
		tick:       cmp.Or(h.Tick, time.Second),
		resolution: cmp.Or(h.Resolution, time.Millisecond),
		omits:      h.Omits,
		prefix:     "storetest:" + hex.EncodeToString(b[:]) + ":",
		ctx:        t.Context(),
		deadlines:  make(map[string]time.Time),
		previous:   make(map[string]time.Time),
	}
}

// key returns the store key of name in this subtest.
func (f *fixture) key(name string) string { return f.prefix + name }

// lease is the lease of every claim unless a test says otherwise.
func (f *fixture) lease() time.Duration { return 10 * f.tick }

// retention is the retention of every record unless a test says otherwise.
func (f *fixture) retention() time.Duration { return 10 * f.tick }

// window is the span of the store's clock a call ran in: from (truncated
// to the store's resolution) before it, to after it. Zero when the harness
// cannot read the clock.
type window struct {
	from, to time.Time
	known    bool
}

// during runs call and returns the window it ran in.
func (f *fixture) during(call func()) window {
	if f.now == nil {
		call()
		return window{}
	}
	from := f.now().Truncate(f.resolution)
	call()
	return window{from: from, to: f.now(), known: true}
}

// requireAt requires that got is d after the store's clock read during the
// call: no earlier than from+d, no later than to+d. However slow the
// machine, a correct store passes.
func (w window) requireAt(t *testing.T, d time.Duration, got time.Time, what string) {
	t.Helper()
	if !w.known {
		return
	}
	lo, hi := w.from.Add(d), w.to.Add(d)
	require.Falsef(t, got.Before(lo) || got.After(hi),
		"%s is %v: it must be %v after the store's clock during the call, between %v and %v", what, got, d, lo, hi)
}

// earliest returns the earliest time d after the call can be, or zero when
// the window is unknown.
func (w window) earliest(d time.Duration) time.Time {
	if !w.known {
		return time.Time{}
	}
	return w.from.Add(d)
}

// note records when the current state of key may end at the earliest.
func (f *fixture) note(key string, deadline time.Time) { f.deadlines[key] = deadline }

// earlier returns the earlier of two deadlines, zero (unknown) winning.
func earlier(a, b time.Time) time.Time {
	if a.IsZero() || b.IsZero() {
		return time.Time{}
	}
	if b.Before(a) {
		return b
	}
	return a
}

// expect fails the test with the message unless ok, or unless the store's
// clock has passed deadline (see failOnTime).
func (f *fixture) expect(t *testing.T, ok bool, deadline time.Time, format string, args ...any) {
	t.Helper()
	if !ok {
		f.failOnTime(t, deadline, format, args...)
	}
}

// expectKept fails the test with the message unless ok, or unless the
// current state of key may have ended.
func (f *fixture) expectKept(t *testing.T, key string, ok bool, format string, args ...any) {
	t.Helper()
	f.expect(t, ok, f.deadlines[key], format, args...)
}

// requireAttempt requires that c, a claim of key, counts want attempts:
// the record it replaced was remembered, unless that record's time was up.
func (f *fixture) requireAttempt(t *testing.T, key string, c store.Claim, want int) {
	t.Helper()
	f.expect(t, c.Record.Attempt == want, f.previous[key], "Acquire(%q) counted attempt %d, want %d", key, c.Record.Attempt, want)
}

// requireNoLoss requires that a call with the token holding key succeeded.
// A lost lease is the store's right once the lease's deadline has passed.
func (f *fixture) requireNoLoss(t *testing.T, key string, err error, op string) {
	t.Helper()
	if errors.Is(err, store.ErrLeaseLost) {
		f.failOnTime(t, f.deadlines[key], "%s(%q) with the holder's token: %v", op, key, err)
	}
	require.NoError(t, err, "%s(%q)", op, key)
}

// failOnTime fails the test, unless the store's clock has passed deadline:
// then what was checked may have ended legitimately, because the machine
// was too slow to check it in time, and the attempt is inconclusive (see
// runCase) instead.
func (f *fixture) failOnTime(t *testing.T, deadline time.Time, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if f.now != nil && !deadline.IsZero() {
		if now := f.now(); !now.Before(deadline) {
			panic(inconclusive{fmt.Sprintf("the store's clock read %v, past %v, before the check ran. %s", now, deadline, msg)})
		}
	}
	t.Fatal(msg)
}

// acquireFor calls Acquire and requires no error. An acquired claim must
// hold the key until lease after the call; its deadline is noted.
func (f *fixture) acquireFor(t *testing.T, key, fingerprint string, lease time.Duration) store.Claim {
	t.Helper()
	return f.acquireWith(t, key, fingerprint, store.Token{}, lease)
}

// acquireWith is acquireFor with the caller's token (zero: the store draws
// one).
func (f *fixture) acquireWith(t *testing.T, key, fingerprint string, token store.Token, lease time.Duration) store.Claim {
	t.Helper()
	var (
		c   store.Claim
		err error
	)
	w := f.during(func() {
		c, err = f.store.Acquire(f.ctx, store.AcquireRequest{Key: key, Lease: lease, Fingerprint: fingerprint, Token: token})
	})
	require.NoError(t, err, "Acquire(%q)", key)
	if c.Acquired {
		w.requireAt(t, lease, c.Record.LeaseUntil, "LeaseUntil of a new claim")
		f.previous[key] = f.deadlines[key]
		f.note(key, c.Record.LeaseUntil)
	}
	return c
}

// acquire calls Acquire with the default lease and requires no error.
func (f *fixture) acquire(t *testing.T, key, fingerprint string) store.Claim {
	t.Helper()
	return f.acquireFor(t, key, fingerprint, f.lease())
}

// claim acquires key and requires that the caller now holds it.
func (f *fixture) claim(t *testing.T, key string) store.Claim {
	t.Helper()
	c := f.acquire(t, key, "")
	require.True(t, c.Acquired, "Acquire(%q) should claim the key; got a %s record", key, c.Record.State)
	requireClaimed(t, c)
	return c
}

// retry claims key again and requires the attempt count want.
func (f *fixture) retry(t *testing.T, key, fingerprint string, want int) store.Claim {
	t.Helper()
	c := f.acquire(t, key, fingerprint)
	require.True(t, c.Acquired, "Acquire(%q) should claim the key again; got a %s record", key, c.Record.State)
	requireClaimed(t, c)
	f.requireAttempt(t, key, c, want)
	return c
}

// requireClaimed requires the shape of an acquired claim.
func requireClaimed(t *testing.T, c store.Claim) {
	t.Helper()
	require.False(t, c.Token.IsZero(), "an acquired claim needs a token")
	require.Equal(t, store.StateProcessing, c.Record.State)
}

// requireHeld requires that another Acquire of key finds it processing, and
// returns the record it saw.
func (f *fixture) requireHeld(t *testing.T, key string, attempt int) store.Record {
	t.Helper()
	deadline := f.deadlines[key]
	c := f.acquire(t, key, "")
	if c.Acquired || c.Record.State != store.StateProcessing {
		f.failOnTime(t, deadline, "Acquire(%q) should find the key held; it got acquired=%v, a %s record", key, c.Acquired, c.Record.State)
	}
	require.True(t, c.Token.IsZero(), "a claim that is not acquired has no token")
	require.Equal(t, attempt, c.Record.Attempt)
	return c.Record
}

// requireCompleted requires that another Acquire of key replays result, and
// returns the record it saw.
func (f *fixture) requireCompleted(t *testing.T, key string, result []byte) store.Record {
	t.Helper()
	deadline := f.deadlines[key]
	c := f.acquire(t, key, "")
	if c.Acquired || c.Record.State != store.StateCompleted {
		f.failOnTime(t, deadline, "Acquire(%q) should replay the completed record; it got acquired=%v, a %s record", key, c.Acquired, c.Record.State)
	}
	require.True(t, c.Token.IsZero(), "a claim that is not acquired has no token")
	requireBytes(t, result, c.Record.Result)
	return c.Record
}

// completeFor calls Complete and requires success; the record's deadline
// is noted. It returns the window the call ran in.
func (f *fixture) completeFor(t *testing.T, key string, token store.Token, result []byte, retention time.Duration) window {
	t.Helper()
	var err error
	w := f.during(func() {
		err = f.store.Complete(f.ctx, store.CompleteRequest{Key: key, Token: token, Result: result, Retention: retention})
	})
	f.requireNoLoss(t, key, err, "Complete")
	f.note(key, w.earliest(retention))
	return w
}

// complete calls Complete with the default retention and requires success.
func (f *fixture) complete(t *testing.T, key string, token store.Token, result []byte) window {
	t.Helper()
	return f.completeFor(t, key, token, result, f.retention())
}

// release calls Release with the default retention and requires success;
// the record's deadline is noted. It returns the window the call ran in.
func (f *fixture) release(t *testing.T, key string, token store.Token, msg string) window {
	t.Helper()
	var err error
	w := f.during(func() {
		err = f.store.Release(f.ctx, f.releaseRequest(key, token, msg))
	})
	f.requireNoLoss(t, key, err, "Release")
	f.note(key, w.earliest(f.retention()))
	return w
}

// extend calls Extend and requires success; the new deadline is noted.
func (f *fixture) extend(t *testing.T, key string, token store.Token, lease time.Duration) window {
	t.Helper()
	var err error
	w := f.during(func() {
		err = f.store.Extend(f.ctx, store.ExtendRequest{Key: key, Token: token, Lease: lease})
	})
	f.requireNoLoss(t, key, err, "Extend")
	f.note(key, w.earliest(lease))
	return w
}

// The requests of the single-key calls, with the default durations.

func (f *fixture) completeRequest(key string, token store.Token, result string) store.CompleteRequest {
	return store.CompleteRequest{Key: key, Token: token, Result: []byte(result), Retention: f.retention()}
}

func (f *fixture) releaseRequest(key string, token store.Token, msg string) store.ReleaseRequest {
	return store.ReleaseRequest{Key: key, Token: token, Error: msg, Retention: f.retention()}
}

func (f *fixture) extendRequest(key string, token store.Token) store.ExtendRequest {
	return store.ExtendRequest{Key: key, Token: token, Lease: f.lease()}
}

// requireLeaseLost requires that err matches store.ErrLeaseLost.
func requireLeaseLost(t *testing.T, err error, op string) {
	t.Helper()
	require.ErrorIs(t, err, store.ErrLeaseLost, "%s should fail with ErrLeaseLost", op)
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

// requireSameTime requires that two readings of one stored time agree.
func requireSameTime(t *testing.T, want, got time.Time, what string) {
	t.Helper()
	require.Truef(t, want.Equal(got), "%s: %v, want %v", what, got, want)
}

// staleToken returns a token no store has handed out.
func staleToken() store.Token { return store.NewToken() }
