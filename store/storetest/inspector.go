package storetest

import (
	"context"
	"errors"
	"maps"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
)

// inspectorCases pin store.Inspector, what an operator sees and removes.
var inspectorCases = []testCase{
	{"Get", testInspectGet},
	{"GetExpired", testInspectExpired},
	{"Delete", testInspectDelete},
	{"Scan", testInspectScan},
	{"ScanStops", testInspectScanStops},
	{"ScanCanceled", testInspectScanCanceled},
}

func (f *fixture) inspector(t *testing.T) store.Inspector {
	t.Helper()
	in, ok := f.store.(store.Inspector)
	if !ok {
		t.Skip("the store does not implement store.Inspector")
	}
	return in
}

// inspect returns the record of key when the store is an Inspector, so
// other rules can check states that Acquire cannot show.
func (f *fixture) inspect(t *testing.T, key string) (store.Record, bool) {
	t.Helper()
	in, ok := f.store.(store.Inspector)
	if !ok {
		return store.Record{}, false
	}
	rec, err := in.Get(f.ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		f.failOnTime(t, f.deadlines[key], "Get(%q): %v", key, err)
	}
	require.NoError(t, err, "Get(%q)", key)
	return rec, true
}

func requireNotFound(t *testing.T, in store.Inspector, f *fixture, key string) {
	t.Helper()
	_, err := in.Get(f.ctx, key)
	require.ErrorIs(t, err, store.ErrNotFound, "Get(%q)", key)
}

func testInspectGet(t *testing.T, f *fixture) {
	in := f.inspector(t)
	key := f.key("get")
	requireNotFound(t, in, f, key)

	c := f.acquire(t, key, "payload-a")
	require.True(t, c.Acquired)
	rec, _ := f.inspect(t, key)
	require.Equal(t, key, rec.Key)
	require.Equal(t, store.StateProcessing, rec.State)
	require.Equal(t, 1, rec.Attempt)
	require.Equal(t, "payload-a", rec.Fingerprint)
	requireSameTime(t, c.Record.LeaseUntil, rec.LeaseUntil, "Get of a claim: LeaseUntil")

	w := f.release(t, key, c.Token, "boom")
	rec, _ = f.inspect(t, key)
	require.Equal(t, store.StateFailed, rec.State)
	require.Equal(t, "boom", rec.LastError)
	require.Equal(t, 1, rec.Attempt)
	w.requireAt(t, f.retention(), rec.ExpiresAt, "Get of a failed record: ExpiresAt")

	c = f.retry(t, key, "", 2)
	w = f.complete(t, key, c.Token, []byte("done"))
	rec, _ = f.inspect(t, key)
	require.Equal(t, store.StateCompleted, rec.State)
	require.Equal(t, 2, rec.Attempt)
	requireBytes(t, []byte("done"), rec.Result)
	require.Equal(t, "boom", rec.LastError)
	w.requireAt(t, f.retention(), rec.ExpiresAt, "Get of a completed record: ExpiresAt")

	// Reading is not claiming: Get changed nothing.
	f.requireCompleted(t, key, []byte("done"))
}

func testInspectExpired(t *testing.T, f *fixture) {
	in := f.inspector(t)
	done, failed := f.key("done"), f.key("failed")
	f.complete(t, done, f.claim(t, done).Token, []byte("x"))
	f.release(t, failed, f.claim(t, failed).Token, "boom")
	f.advance(f.retention())
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
	requireLeaseLost(t, f.store.Complete(f.ctx, f.completeRequest(held, old.Token, "x")), "Complete of a deleted claim")
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

	states := map[string]store.State{}
	for rec, err := range in.Scan(f.ctx, prefix) {
		require.NoError(t, err, "Scan(%q)", prefix)
		_, seen := states[rec.Key]
		require.False(t, seen, "Scan(%q) yielded %q twice", prefix, rec.Key)
		states[rec.Key] = rec.State
	}
	want := map[string]store.State{
		processing: store.StateProcessing,
		completed:  store.StateCompleted,
		failed:     store.StateFailed,
		nested:     store.StateProcessing,
	}
	// Expired claims are kept until taken over; the settled records only
	// for their retention.
	f.expect(t, maps.Equal(want, states), earlier(f.deadlines[completed], f.deadlines[failed]),
		"Scan(%q) must yield the records under its prefix, and only them: got %v, want %v", prefix, states, want)
}

func testInspectScanStops(t *testing.T, f *fixture) {
	in := f.inspector(t)
	prefix := f.key("stop:")
	for _, name := range []string{"a", "b", "c", "d"} {
		f.claim(t, prefix+name)
	}
	// Range-over-func panics if the iterator yields after the loop broke.
	calls := 0
	for _, err := range in.Scan(f.ctx, prefix) {
		require.NoError(t, err)
		calls++
		break
	}
	require.Equal(t, 1, calls, "Scan must stop when the loop breaks")

	// Unbroken, the scan yields every record.
	calls = 0
	for _, err := range in.Scan(f.ctx, prefix) {
		require.NoError(t, err)
		calls++
	}
	require.Equal(t, 4, calls)
}

func testInspectScanCanceled(t *testing.T, f *fixture) {
	in := f.inspector(t)
	prefix := f.key("canceled:")
	f.claim(t, prefix+"a")
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()

	var errs []error
	for rec, err := range in.Scan(ctx, prefix) {
		require.Error(t, err, "Scan with a canceled context yielded %q", rec.Key)
		require.Zero(t, rec, "a failure comes with a zero Record")
		errs = append(errs, err)
	}
	require.Len(t, errs, 1, "a failure is yielded once and ends the scan")
	require.ErrorIs(t, errs[0], context.Canceled)
}
