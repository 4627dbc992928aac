package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
)

// stepCases pin store.StepStore: step records live and die with their
// key's record, and only the token holding the key reads or writes them.
var stepCases = []testCase{
	{"FreshRecordHasNone", testStepsFresh},
	{"SaveAndLoad", testStepsSaveLoad},
	{"Fenced", testStepsFenced},
	{"SettledRecordRefuses", testStepsSettled},
	{"SurviveRelease", testStepsSurviveRelease},
	{"SurviveTakeover", testStepsSurviveTakeover},
	{"SurviveOwnToken", testStepsSurviveOwnToken},
	{"GoneWithExpiredRecord", testStepsGoneAtExpiry},
	{"GoneWithDeletedRecord", testStepsGoneAtDelete},
	{"Inspected", testStepsInspected},
	{"BadName", testStepsBadName},
	{"Concurrent", testStepsConcurrent},
	{"LargeValue", testStepsLargeValue},
	{"Canceled", testStepsCanceled},
}

func (f *fixture) stepStore(t *testing.T) store.StepStore {
	t.Helper()
	s, ok := f.store.(store.StepStore)
	if !ok || !store.KeepsSteps(f.store) {
		t.Skip("the store keeps no step records (store.StepStore, store.KeepsSteps)")
	}
	return s
}

// saveStep records name with value under the token holding key, and
// requires success.
func (f *fixture) saveStep(t *testing.T, key string, token store.Token, name, value string) {
	t.Helper()
	err := f.stepStore(t).SaveStep(f.ctx, store.SaveStepRequest{Key: key, Token: token, Name: name, Value: []byte(value), Retention: f.retention()})
	f.requireNoLoss(t, key, err, "SaveStep")
}

// loadSteps reads the step records of key with the token holding it, as a
// map of name to value, and requires one record per name.
func (f *fixture) loadSteps(t *testing.T, key string, token store.Token) map[string]string {
	t.Helper()
	recs, err := f.stepStore(t).LoadSteps(f.ctx, store.StepsRequest{Key: key, Token: token})
	f.requireNoLoss(t, key, err, "LoadSteps")
	return stepMap(t, recs)
}

// stepMap turns step records into a map, requiring each name once.
func stepMap(t *testing.T, recs []store.StepRecord) map[string]string {
	t.Helper()
	m := make(map[string]string, len(recs))
	for _, r := range recs {
		_, dup := m[r.Name]
		require.Falsef(t, dup, "step %q is returned twice", r.Name)
		m[r.Name] = string(r.Value)
	}
	return m
}

func testStepsFresh(t *testing.T, f *fixture) {
	f.stepStore(t)
	key := f.key("fresh")
	c := f.claim(t, key)
	require.Empty(t, f.loadSteps(t, key, c.Token), "a fresh record has no step records")
}

func testStepsSaveLoad(t *testing.T, f *fixture) {
	s := f.stepStore(t)
	key := f.key("save")
	c := f.claim(t, key)
	long := strings.Repeat("é", store.MaxStepNameLen/2) // the longest name, in two-byte runes
	value := []byte("charged\x00\xff")
	require.NoError(t, s.SaveStep(f.ctx, store.SaveStepRequest{Key: key, Token: c.Token, Name: "charge", Value: value, Retention: f.retention()}))
	copy(value, "XXXXXXX") // the store must have copied the bytes
	f.saveStep(t, key, c.Token, long, "reserved")
	f.saveStep(t, key, c.Token, "notify", "")
	require.NoError(t, s.SaveStep(f.ctx, store.SaveStepRequest{Key: key, Token: c.Token, Name: "nil", Retention: f.retention()}))
	want := map[string]string{"charge": "charged\x00\xff", long: "reserved", "notify": "", "nil": ""}
	require.Equal(t, want, f.loadSteps(t, key, c.Token))

	// A record of the same name is replaced, not added.
	f.saveStep(t, key, c.Token, "charge", "refunded")
	want["charge"] = "refunded"
	recs, err := s.LoadSteps(f.ctx, store.StepsRequest{Key: key, Token: c.Token})
	f.requireNoLoss(t, key, err, "LoadSteps")
	require.Equal(t, want, stepMap(t, recs))

	// What LoadSteps returns is the caller's: changing it changes nothing.
	for i := range recs {
		for j := range recs[i].Value {
			recs[i].Value[j] = 'Z'
		}
	}
	require.Equal(t, want, f.loadSteps(t, key, c.Token))
}

func testStepsFenced(t *testing.T, f *fixture) {
	s := f.stepStore(t)
	key := f.key("fenced")
	c := f.claim(t, key)
	f.saveStep(t, key, c.Token, "charge", "a")

	other := staleToken()
	requireLeaseLost(t, s.SaveStep(f.ctx, store.SaveStepRequest{Key: key, Token: other, Name: "charge", Value: []byte("b"), Retention: f.retention()}), "SaveStep with a token that does not hold the key")
	requireLeaseLost(t, s.SaveStep(f.ctx, store.SaveStepRequest{Key: key, Token: other, Name: "extra", Value: []byte("b"), Retention: f.retention()}), "SaveStep of a new name with a token that does not hold the key")
	_, err := s.LoadSteps(f.ctx, store.StepsRequest{Key: key, Token: other})
	requireLeaseLost(t, err, "LoadSteps with a token that does not hold the key")
	require.Equal(t, map[string]string{"charge": "a"}, f.loadSteps(t, key, c.Token), "a refused SaveStep changes nothing")

	absent := f.key("absent")
	requireLeaseLost(t, s.SaveStep(f.ctx, store.SaveStepRequest{Key: absent, Token: c.Token, Name: "charge", Retention: f.retention()}), "SaveStep of an absent key")
	_, err = s.LoadSteps(f.ctx, store.StepsRequest{Key: absent, Token: c.Token})
	requireLeaseLost(t, err, "LoadSteps of an absent key")
	// The refused SaveStep made no record.
	fresh := f.claim(t, absent)
	require.Equal(t, 1, fresh.Record.Attempt)
	require.Empty(t, f.loadSteps(t, absent, fresh.Token))
}

func testStepsSettled(t *testing.T, f *fixture) {
	s := f.stepStore(t)
	done, failed := f.key("done"), f.key("failed")
	cd, cf := f.claim(t, done), f.claim(t, failed)
	f.saveStep(t, done, cd.Token, "charge", "a")
	f.saveStep(t, failed, cf.Token, "charge", "a")
	f.complete(t, done, cd.Token, []byte("ok"))
	f.release(t, failed, cf.Token, "boom")
	for key, token := range map[string]store.Token{done: cd.Token, failed: cf.Token} {
		requireLeaseLost(t, s.SaveStep(f.ctx, store.SaveStepRequest{Key: key, Token: token, Name: "late", Retention: f.retention()}), "SaveStep with the token that settled the record")
		_, err := s.LoadSteps(f.ctx, store.StepsRequest{Key: key, Token: token})
		requireLeaseLost(t, err, "LoadSteps with the token that settled the record")
	}
	if rec, ok := f.inspect(t, done); ok {
		require.Equal(t, map[string]string{"charge": "a"}, stepMap(t, rec.Steps), "a refused SaveStep changes nothing")
	}
}

func testStepsSurviveRelease(t *testing.T, f *fixture) {
	key := f.key("release")
	c := f.claim(t, key)
	f.saveStep(t, key, c.Token, "charge", "ch_1")
	f.release(t, key, c.Token, "reserve failed")

	c = f.retry(t, key, "", 2)
	require.Equal(t, map[string]string{"charge": "ch_1"}, f.loadSteps(t, key, c.Token), "the failed record's step records are kept for the next attempt")
	f.saveStep(t, key, c.Token, "reserve", "r_1")
	f.complete(t, key, c.Token, []byte("ok"))
	if rec, ok := f.inspect(t, key); ok {
		require.Equal(t, map[string]string{"charge": "ch_1", "reserve": "r_1"}, stepMap(t, rec.Steps), "a completed record keeps its step records")
	}
}

func testStepsSurviveTakeover(t *testing.T, f *fixture) {
	s := f.stepStore(t)
	key := f.key("takeover")
	old := f.claim(t, key)
	f.saveStep(t, key, old.Token, "charge", "ch_1")
	f.advance(f.lease())

	c := f.acquire(t, key, "")
	require.True(t, c.Acquired, "a key whose lease expired must be taken over")
	require.Equal(t, map[string]string{"charge": "ch_1"}, f.loadSteps(t, key, c.Token), "a takeover keeps the step records")

	requireLeaseLost(t, s.SaveStep(f.ctx, store.SaveStepRequest{Key: key, Token: old.Token, Name: "reserve", Value: []byte("stale"), Retention: f.retention()}), "SaveStep with a taken-over token")
	_, err := s.LoadSteps(f.ctx, store.StepsRequest{Key: key, Token: old.Token})
	requireLeaseLost(t, err, "LoadSteps with a taken-over token")
	require.Equal(t, map[string]string{"charge": "ch_1"}, f.loadSteps(t, key, c.Token), "the old holder recorded nothing")
}

func testStepsSurviveOwnToken(t *testing.T, f *fixture) {
	f.stepStore(t)
	key := f.key("own")
	token := store.NewToken()
	c := f.claimWith(t, key, token)
	f.saveStep(t, key, c.Token, "charge", "ch_1")
	again := f.claimWith(t, key, token)
	require.Equal(t, map[string]string{"charge": "ch_1"}, f.loadSteps(t, key, again.Token), "a claim granted again with its own token keeps its step records")
}

func testStepsGoneAtExpiry(t *testing.T, f *fixture) {
	f.stepStore(t)
	done, failed := f.key("done"), f.key("failed")
	cd, cf := f.claim(t, done), f.claim(t, failed)
	f.saveStep(t, done, cd.Token, "charge", "a")
	f.saveStep(t, failed, cf.Token, "charge", "a")
	f.complete(t, done, cd.Token, []byte("ok"))
	f.release(t, failed, cf.Token, "boom")
	f.advance(f.retention())
	for _, key := range []string{done, failed} {
		c := f.acquire(t, key, "")
		require.True(t, c.Acquired, "Acquire(%q) must claim the expired key afresh", key)
		require.Equal(t, 1, c.Record.Attempt, "Acquire(%q) must claim the expired key afresh", key)
		require.Empty(t, f.loadSteps(t, key, c.Token), "the step records of %q expired with its record", key)
		if rec, ok := f.inspect(t, key); ok {
			require.Empty(t, rec.Steps, "Get(%q) of a fresh claim", key)
		}
	}
}

func testStepsGoneAtDelete(t *testing.T, f *fixture) {
	f.stepStore(t)
	in := f.inspector(t)
	deleted, deletedIf := f.key("delete"), f.key("deleteif")
	for _, key := range []string{deleted, deletedIf} {
		c := f.claim(t, key)
		f.saveStep(t, key, c.Token, "charge", "a")
		f.release(t, key, c.Token, "boom")
	}
	require.NoError(t, in.Delete(f.ctx, deleted))
	ok, _, err := in.DeleteIf(f.ctx, store.DeleteRequest{Key: deletedIf})
	require.NoError(t, err)
	f.expectKept(t, deletedIf, ok, "DeleteIf(%q) of a failed record must delete it", deletedIf)
	for _, key := range []string{deleted, deletedIf} {
		c := f.claim(t, key)
		require.Equal(t, 1, c.Record.Attempt, "Acquire(%q) after a delete claims afresh", key)
		require.Empty(t, f.loadSteps(t, key, c.Token), "the step records of %q were deleted with its record", key)
	}
}

func testStepsInspected(t *testing.T, f *fixture) {
	f.stepStore(t)
	in := f.inspector(t)
	key := f.key("inspected")
	c := f.claim(t, key)
	rec, _ := f.inspect(t, key)
	require.Empty(t, rec.Steps)
	f.saveStep(t, key, c.Token, "charge", "a")
	f.saveStep(t, key, c.Token, "reserve", "b")
	want := map[string]string{"charge": "a", "reserve": "b"}
	rec, _ = f.inspect(t, key)
	require.Equal(t, want, stepMap(t, rec.Steps), "Get of a processing record")
	f.release(t, key, c.Token, "boom")
	rec, _ = f.inspect(t, key)
	require.Equal(t, want, stepMap(t, rec.Steps), "Get of a failed record")

	other := f.key("other")
	f.complete(t, other, f.claim(t, other).Token, nil)
	seen := map[string]map[string]string{}
	for rec, err := range in.Scan(f.ctx, f.prefix) {
		require.NoError(t, err)
		seen[rec.Key] = stepMap(t, rec.Steps)
	}
	f.expectKept(t, key, len(seen) == 2, "Scan(%q) found %d records, want 2", f.prefix, len(seen))
	require.Equal(t, want, seen[key], "Scan returns the step records")
	require.Empty(t, seen[other], "Scan of a record without steps")
}

func testStepsBadName(t *testing.T, f *fixture) {
	s := f.stepStore(t)
	key := f.key("badname")
	c := f.claim(t, key)
	for name, bad := range map[string]string{
		"empty":    "",
		"too long": strings.Repeat("x", store.MaxStepNameLen+1),
		"not utf8": "charge\xff",
	} {
		err := s.SaveStep(f.ctx, store.SaveStepRequest{Key: key, Token: c.Token, Name: bad, Value: []byte("v"), Retention: f.retention()})
		require.ErrorIs(t, err, store.ErrInvalidConfig, "SaveStep with a name that is %s", name)
	}
	require.Empty(t, f.loadSteps(t, key, c.Token), "a refused name records nothing")
}

func testStepsConcurrent(t *testing.T, f *fixture) {
	s := f.stepStore(t)
	key := f.key("concurrent")
	c := f.claim(t, key)
	const n = 16
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			errs[i] = s.SaveStep(f.ctx, store.SaveStepRequest{Key: key, Token: c.Token, Name: fmt.Sprintf("item/%d", i), Value: []byte{byte(i)}, Retention: f.retention()})
		})
	}
	wg.Wait()
	for i, err := range errs {
		f.requireNoLoss(t, key, err, fmt.Sprintf("SaveStep #%d", i))
	}
	got := f.loadSteps(t, key, c.Token)
	require.Len(t, got, n, "every concurrent SaveStep is kept")
	for i := range n {
		require.Equal(t, string([]byte{byte(i)}), got[fmt.Sprintf("item/%d", i)])
	}
}

func testStepsLargeValue(t *testing.T, f *fixture) {
	f.stepStore(t)
	key := f.key("large")
	c := f.claim(t, key)
	value := strings.Repeat("0123456789abcdef", 4<<10) // 64 KiB, the receiver's default bound
	f.saveStep(t, key, c.Token, "big", value)
	require.Equal(t, value, f.loadSteps(t, key, c.Token)["big"])
}

func testStepsCanceled(t *testing.T, f *fixture) {
	s := f.stepStore(t)
	key := f.key("canceled")
	c := f.claim(t, key)
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	require.Error(t, s.SaveStep(ctx, store.SaveStepRequest{Key: key, Token: c.Token, Name: "charge", Retention: f.retention()}), "SaveStep with a cancelled context")
	_, err := s.LoadSteps(ctx, store.StepsRequest{Key: key, Token: c.Token})
	require.Error(t, err, "LoadSteps with a cancelled context")
	require.Empty(t, f.loadSteps(t, key, c.Token))
}
