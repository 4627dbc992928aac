package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
)

// inspectorCases pin dedup.Inspector, what an operator sees and removes.
var inspectorCases = []testCase{
	{"Get", testInspectGet},
	{"GetExpired", testInspectExpired},
	{"Delete", testInspectDelete},
	{"Scan", testInspectScan},
	{"ScanStops", testInspectScanStops},
}

func (f *fixture) inspector(t *testing.T) dedup.Inspector {
	t.Helper()
	in, ok := f.store.(dedup.Inspector)
	if !ok {
		t.Skip("the store does not implement dedup.Inspector")
	}
	return in
}

// inspect returns the record of key when the store is an Inspector, so
// other rules can check states that Acquire cannot show.
func (f *fixture) inspect(t *testing.T, key string) (dedup.Record, bool) {
	t.Helper()
	in, ok := f.store.(dedup.Inspector)
	if !ok {
		return dedup.Record{}, false
	}
	rec, err := in.Get(f.ctx, key)
	require.NoError(t, err, "Get(%q)", key)
	return rec, true
}

func requireNotFound(t *testing.T, in dedup.Inspector, f *fixture, key string) {
	t.Helper()
	_, err := in.Get(f.ctx, key)
	require.ErrorIs(t, err, dedup.ErrNotFound, "Get(%q)", key)
}

func testInspectGet(t *testing.T, f *fixture) {
	in := f.inspector(t)
	key := f.key("get")
	requireNotFound(t, in, f, key)

	c := f.acquire(t, key, "payload-a")
	require.True(t, c.Acquired)
	rec, err := in.Get(f.ctx, key)
	require.NoError(t, err)
	require.Equal(t, key, rec.Key)
	require.Equal(t, dedup.StateProcessing, rec.State)
	require.Equal(t, 1, rec.Attempt)
	require.Equal(t, "payload-a", rec.Fingerprint)
	f.requireAbout(t, c.Record.LeaseUntil, rec.LeaseUntil, "LeaseUntil")

	f.release(t, key, c.Token, "boom")
	rec, err = in.Get(f.ctx, key)
	require.NoError(t, err)
	require.Equal(t, dedup.StateFailed, rec.State)
	require.Equal(t, "boom", rec.LastError)
	require.Equal(t, 1, rec.Attempt)

	c = f.claim(t, key)
	f.complete(t, key, c.Token, []byte("done"))
	rec, err = in.Get(f.ctx, key)
	require.NoError(t, err)
	require.Equal(t, dedup.StateCompleted, rec.State)
	require.Equal(t, 2, rec.Attempt)
	requireBytes(t, []byte("done"), rec.Result)

	// Reading is not claiming: Get changed nothing.
	f.requireCompleted(t, key, []byte("done"))
}

func testInspectExpired(t *testing.T, f *fixture) {
	in := f.inspector(t)
	done, failed := f.key("done"), f.key("failed")
	f.complete(t, done, f.claim(t, done).Token, []byte("x"))
	f.release(t, failed, f.claim(t, failed).Token, "boom")
	f.advance(f.retention() + f.tick)
	requireNotFound(t, in, f, done)
	requireNotFound(t, in, f, failed)
}

func testInspectDelete(t *testing.T, f *fixture) {
	in := f.inspector(t)
	require.NoError(t, in.Delete(f.ctx, f.key("never")), "deleting an absent key is not an error")

	done := f.key("done")
	f.complete(t, done, f.claim(t, done).Token, []byte("x"))
	require.NoError(t, in.Delete(f.ctx, done))
	requireNotFound(t, in, f, done)
	c := f.claim(t, done)
	require.Equal(t, 1, c.Record.Attempt, "a deleted record is forgotten")

	held := f.key("held")
	old := f.claim(t, held)
	require.NoError(t, in.Delete(f.ctx, held))
	requireNotFound(t, in, f, held)
	requireLeaseLost(t, f.store.Complete(f.ctx, held, old.Token, []byte("x"), f.retention()), "Complete of a deleted claim")
	require.Equal(t, 1, f.claim(t, held).Record.Attempt)
}

func testInspectScan(t *testing.T, f *fixture) {
	in := f.inspector(t)
	prefix := f.key("scan:")
	processing, completed, failed, nested := prefix+"processing", prefix+"completed", prefix+"failed", prefix+"nested:one"
	f.claim(t, processing)
	f.complete(t, completed, f.claim(t, completed).Token, []byte("x"))
	f.release(t, failed, f.claim(t, failed).Token, "boom")
	f.claim(t, nested)
	f.claim(t, f.key("scanner"))     // shares the text "scan", not the prefix
	f.claim(t, f.key("other:scan:")) // contains the prefix, does not start with it

	states := map[string]dedup.State{}
	require.NoError(t, in.Scan(f.ctx, prefix, func(rec dedup.Record) bool {
		states[rec.Key] = rec.State
		return true
	}))
	require.Equal(t, map[string]dedup.State{
		processing: dedup.StateProcessing,
		completed:  dedup.StateCompleted,
		failed:     dedup.StateFailed,
		nested:     dedup.StateProcessing,
	}, states)
}

func testInspectScanStops(t *testing.T, f *fixture) {
	in := f.inspector(t)
	prefix := f.key("stop:")
	for _, name := range []string{"a", "b", "c", "d"} {
		f.claim(t, prefix+name)
	}
	calls := 0
	require.NoError(t, in.Scan(f.ctx, prefix, func(dedup.Record) bool {
		calls++
		return false
	}))
	require.Equal(t, 1, calls, "Scan must stop when fn returns false")
}
