package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
)

// Fields names fields of store.Record, for Harness.Omits.
type Fields uint8

// The fields of store.Record a store may say it does not keep.
const (
	// FieldToken is Record.Token in the answers of an Inspector.
	FieldToken Fields = 1 << iota
	// FieldCreatedAt is Record.CreatedAt in the answers of an Inspector.
	FieldCreatedAt
	// FieldCompletedAt is Record.CompletedAt in the answers of an
	// Inspector.
	FieldCompletedAt
)

// recordFieldCases pin what an Inspector tells an operator of a record's
// history: the token of its last claim and when it was created and
// settled. Each case skips for a store without an Inspector; a field the
// harness says the store omits (Harness.Omits) must then be zero.
var recordFieldCases = []testCase{
	{"Lifecycle", testFieldsLifecycle},
	{"Takeover", testFieldsTakeover},
	{"Afresh", testFieldsAfresh},
	{"ScanAndDeleteIf", testFieldsScanDeleteIf},
	{"Batch", testFieldsBatch},
}

// stamp is what a record's time field must hold: zero, exactly a time read
// before, or a time within the window of the call that set it (on the
// store's clock, truncated to its resolution).
type stamp struct {
	zero bool
	at   time.Time
	in   window
}

var unset = stamp{zero: true}

func exactly(at time.Time) stamp { return stamp{at: at} }

func within(w window) stamp { return stamp{in: w} }

// requireStamp requires that got, the field omitted or not, is what want
// says. Without the store's clock, a time set by a call need only be set.
func (f *fixture) requireStamp(t *testing.T, field Fields, got time.Time, want stamp, what string) {
	t.Helper()
	switch {
	case f.omits&field != 0 || want.zero:
		require.Truef(t, got.IsZero(), "%s is %v: it must be zero", what, got)
	case !want.at.IsZero():
		requireSameTime(t, want.at, got, what)
	default:
		require.Falsef(t, got.IsZero(), "%s is zero: the store must set it", what)
		want.in.requireAt(t, 0, got, what)
	}
}

// requireFields requires a record's Token, CreatedAt and CompletedAt, and
// that its times are in order.
func (f *fixture) requireFields(t *testing.T, rec store.Record, token store.Token, created, completed stamp, what string) {
	t.Helper()
	if f.omits&FieldToken != 0 {
		require.Truef(t, rec.Token.IsZero(), "%s: Token is %v: the store omits it, so it must be zero", what, rec.Token)
	} else {
		require.Equalf(t, token, rec.Token, "%s: Token must be the last claim's (the holder's while processing, the settling one after)", what)
	}
	f.requireStamp(t, FieldCreatedAt, rec.CreatedAt, created, what+": CreatedAt")
	f.requireStamp(t, FieldCompletedAt, rec.CompletedAt, completed, what+": CompletedAt")
	if c := rec.CreatedAt; !c.IsZero() {
		if rec.State == store.StateProcessing {
			require.Falsef(t, c.After(rec.LeaseUntil), "%s: CreatedAt %v is after LeaseUntil %v", what, c, rec.LeaseUntil)
		}
		if !rec.CompletedAt.IsZero() {
			require.Falsef(t, c.After(rec.CompletedAt), "%s: CreatedAt %v is after CompletedAt %v", what, c, rec.CompletedAt)
		}
	}
	if d := rec.CompletedAt; !d.IsZero() && rec.State != store.StateProcessing {
		require.Falsef(t, d.After(rec.ExpiresAt), "%s: CompletedAt %v is after ExpiresAt %v", what, d, rec.ExpiresAt)
	}
}

// get returns the record of key from the store's Inspector.
func (f *fixture) get(t *testing.T, in store.Inspector, key string) store.Record {
	t.Helper()
	rec, err := in.Get(f.ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		f.failOnTime(t, f.deadlines[key], "Get(%q): %v", key, err)
	}
	require.NoError(t, err, "Get(%q)", key)
	return rec
}

// claimIn claims key and returns the claim and the window it was made in.
func (f *fixture) claimIn(t *testing.T, key string) (store.Claim, window) {
	t.Helper()
	var c store.Claim
	w := f.during(func() { c = f.claim(t, key) })
	return c, w
}

// retryIn claims key again, requiring the attempt count want, and returns
// the claim and the window it was made in.
func (f *fixture) retryIn(t *testing.T, key string, want int) (store.Claim, window) {
	t.Helper()
	var c store.Claim
	w := f.during(func() { c = f.retry(t, key, "", want) })
	return c, w
}

// testFieldsLifecycle follows one key through claims, an extension,
// failures and a completion: the token is always the last claim's,
// CreatedAt the first claim's, CompletedAt the last settling call's and
// zero while processing. The clock moves between the calls, so a time
// set again by a later call shows.
func testFieldsLifecycle(t *testing.T, f *fixture) {
	in := f.inspector(t)
	key := f.key("fields")

	c, w := f.claimIn(t, key)
	rec := f.get(t, in, key)
	f.requireFields(t, rec, c.Token, within(w), unset, "Get of a claim")
	created := rec.CreatedAt

	f.advance(f.tick)
	f.extend(t, key, c.Token, f.lease())
	f.requireFields(t, f.get(t, in, key), c.Token, exactly(created), unset, "Get of an extended claim")

	f.advance(f.tick)
	w = f.release(t, key, c.Token, "boom")
	f.requireFields(t, f.get(t, in, key), c.Token, exactly(created), within(w), "Get of a failed record")

	f.advance(f.tick)
	c, _ = f.retryIn(t, key, 2)
	f.requireFields(t, f.get(t, in, key), c.Token, exactly(created), unset, "Get of attempt 2 after a failure")

	f.advance(f.tick)
	w = f.release(t, key, c.Token, "boom again")
	f.requireFields(t, f.get(t, in, key), c.Token, exactly(created), within(w), "Get of a record failed twice: the last failure")

	f.advance(f.tick)
	c, _ = f.retryIn(t, key, 3)
	f.advance(f.tick)
	w = f.complete(t, key, c.Token, []byte("done"))
	rec = f.get(t, in, key)
	f.requireFields(t, rec, c.Token, exactly(created), within(w), "Get of a record completed by attempt 3")
	completed := rec.CompletedAt

	// Completing again with the completing token changes nothing.
	f.advance(f.tick)
	err := f.store.Complete(f.ctx, f.completeRequest(key, c.Token, "again"))
	f.expectKept(t, key, err == nil, "Complete again with the token that completed the record: %v", err)
	f.requireFields(t, f.get(t, in, key), c.Token, exactly(created), exactly(completed), "Get after completing again")
}

// testFieldsTakeover: a takeover of an expired lease keeps CreatedAt and
// carries the new holder's token, which a stale call does not change.
func testFieldsTakeover(t *testing.T, f *fixture) {
	in := f.inspector(t)
	key := f.key("takeover")
	old, w := f.claimIn(t, key)
	rec := f.get(t, in, key)
	f.requireFields(t, rec, old.Token, within(w), unset, "Get of the first claim")
	created := rec.CreatedAt

	f.advance(f.lease())
	c, _ := f.retryIn(t, key, 2)
	f.requireFields(t, f.get(t, in, key), c.Token, exactly(created), unset, "Get of a takeover")

	requireLeaseLost(t, f.store.Complete(f.ctx, f.completeRequest(key, old.Token, "stale")), "Complete with a taken-over token")
	requireLeaseLost(t, f.store.Release(f.ctx, f.releaseRequest(key, old.Token, "stale")), "Release with a taken-over token")
	f.requireFields(t, f.get(t, in, key), c.Token, exactly(created), unset, "Get after the stale holder's calls")

	f.advance(f.tick)
	w = f.complete(t, key, c.Token, []byte("new"))
	f.requireFields(t, f.get(t, in, key), c.Token, exactly(created), within(w), "Get of a record completed after a takeover")
}

// testFieldsAfresh: a key claimed afresh, after its record expired or was
// deleted, is created anew.
func testFieldsAfresh(t *testing.T, f *fixture) {
	in := f.inspector(t)
	key := f.key("afresh")
	f.complete(t, key, f.claim(t, key).Token, []byte("x"))
	f.advance(f.retention())
	c, w := f.claimIn(t, key)
	require.Equal(t, 1, c.Record.Attempt, "a key whose record expired is claimed afresh")
	f.requireFields(t, f.get(t, in, key), c.Token, within(w), unset, "Get of a claim after the record expired")

	f.advance(f.tick)
	require.NoError(t, in.Delete(f.ctx, key))
	c, w = f.claimIn(t, key)
	require.Equal(t, 1, c.Record.Attempt, "a deleted key is claimed afresh")
	f.requireFields(t, f.get(t, in, key), c.Token, within(w), unset, "Get of a claim after Delete")
}

// testFieldsScanDeleteIf: Scan and DeleteIf answer with the fields Get
// answers with, for every state.
func testFieldsScanDeleteIf(t *testing.T, f *fixture) {
	in := f.inspector(t)
	prefix := f.key("scan:")
	processing, completed, failed := prefix+"processing", prefix+"completed", prefix+"failed"

	type want struct {
		token              store.Token
		created, completed stamp
	}
	wants := map[string]*want{}
	c, w := f.claimIn(t, processing)
	wants[processing] = &want{c.Token, within(w), unset}
	c, w = f.claimIn(t, completed)
	wants[completed] = &want{c.Token, within(w), unset}
	wants[completed].completed = within(f.complete(t, completed, c.Token, []byte("x")))
	c, w = f.claimIn(t, failed)
	wants[failed] = &want{c.Token, within(w), unset}
	wants[failed].completed = within(f.release(t, failed, c.Token, "boom"))
	for key, wt := range wants {
		rec := f.get(t, in, key)
		f.requireFields(t, rec, wt.token, wt.created, wt.completed, "Get of the "+rec.State.String()+" record")
		// From here on, every answer must give the times Get gave.
		wt.created, wt.completed = exactly(rec.CreatedAt), exactly(rec.CompletedAt)
		if rec.CompletedAt.IsZero() {
			wt.completed = unset
		}
	}

	seen := map[string]bool{}
	for rec, err := range in.Scan(f.ctx, prefix) {
		require.NoError(t, err, "Scan(%q)", prefix)
		wt, ok := wants[rec.Key]
		require.True(t, ok, "Scan(%q) yielded %q", prefix, rec.Key)
		seen[rec.Key] = true
		f.requireFields(t, rec, wt.token, wt.created, wt.completed, "Scan of the "+rec.State.String()+" record")
	}
	f.expect(t, len(seen) == len(wants), earlier(f.deadlines[completed], f.deadlines[failed]),
		"Scan(%q) yielded %d of the %d records", prefix, len(seen), len(wants))

	for _, key := range []string{processing, completed, failed} {
		wt := wants[key]
		deleted, rec, err := in.DeleteIf(f.ctx, store.DeleteRequest{Key: key})
		if errors.Is(err, store.ErrNotFound) {
			f.failOnTime(t, f.deadlines[key], "DeleteIf(%q): %v", key, err)
		}
		require.NoError(t, err, "DeleteIf(%q)", key)
		f.expectKept(t, key, deleted == (key != processing), "DeleteIf(%q) of the %s record: deleted %v", key, rec.State, deleted)
		f.requireFields(t, rec, wt.token, wt.created, wt.completed, "DeleteIf of the "+rec.State.String()+" record")
	}
}

// testFieldsBatch: the batch calls set the fields as the single-key calls
// do: AcquireBatch of a fresh key, of a failed record and of an expired
// lease, ExtendBatch, CompleteBatch.
func testFieldsBatch(t *testing.T, f *fixture) {
	b := f.batchStore(t)
	in := f.inspector(t)
	fresh, failed, taken := f.key("fresh"), f.key("failed"), f.key("taken")

	// failed: a failed record; taken: a claim whose lease ends.
	c, _ := f.claimIn(t, failed)
	f.release(t, failed, c.Token, "boom")
	require.True(t, f.acquireFor(t, taken, "", f.tick).Acquired)
	created := map[string]time.Time{
		failed: f.get(t, in, failed).CreatedAt,
		taken:  f.get(t, in, taken).CreatedAt,
	}
	f.advance(2 * f.tick)

	keys := []string{fresh, failed, taken}
	reqs := make([]store.AcquireRequest, len(keys))
	for i, key := range keys {
		reqs[i] = store.AcquireRequest{Key: key, Lease: f.lease()}
	}
	var got []store.AcquireOutcome
	w := f.during(func() { got = b.AcquireBatch(f.ctx, reqs) })
	require.Len(t, got, len(keys))
	tokens := map[string]store.Token{}
	for i, key := range keys {
		require.NoError(t, got[i].Err, "AcquireBatch of %q", key)
		require.True(t, got[i].Claim.Acquired, "AcquireBatch of %q", key)
		tokens[key] = got[i].Claim.Token
		f.note(key, w.earliest(f.lease()))
		rec := f.get(t, in, key)
		if key == fresh {
			f.requireFields(t, rec, tokens[key], within(w), unset, "Get of a fresh claim of AcquireBatch")
			created[key] = rec.CreatedAt
			continue
		}
		f.requireFields(t, rec, tokens[key], exactly(created[key]), unset, "Get of a claim of AcquireBatch of the "+key[len(f.prefix):]+" key")
	}

	f.advance(f.tick)
	ereqs := make([]store.ExtendRequest, len(keys))
	for i, key := range keys {
		ereqs[i] = f.extendRequest(key, tokens[key])
	}
	w = f.during(func() {
		for i, err := range b.ExtendBatch(f.ctx, ereqs) {
			f.requireNoLoss(t, keys[i], err, "ExtendBatch")
		}
	})
	for _, key := range keys {
		f.note(key, w.earliest(f.lease()))
		f.requireFields(t, f.get(t, in, key), tokens[key], exactly(created[key]), unset, "Get of a claim extended by ExtendBatch")
	}

	f.advance(f.tick)
	creqs := make([]store.CompleteRequest, len(keys))
	for i, key := range keys {
		creqs[i] = f.completeRequest(key, tokens[key], "r")
	}
	w = f.during(func() {
		for i, err := range b.CompleteBatch(f.ctx, creqs) {
			f.requireNoLoss(t, keys[i], err, "CompleteBatch")
		}
	})
	for _, key := range keys {
		f.note(key, w.earliest(f.retention()))
		f.requireFields(t, f.get(t, in, key), tokens[key], exactly(created[key]), within(w), "Get of a record CompleteBatch completed")
	}
}
