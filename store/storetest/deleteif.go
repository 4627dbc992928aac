package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
)

// deleteIfCases pin Inspector.DeleteIf, the delete that never pulls a key
// from under a live holder.
var deleteIfCases = []testCase{
	{"DeleteIfStates", testDeleteIfStates},
	{"DeleteIfAbsent", testDeleteIfAbsent},
	{"DeleteIfHolder", testDeleteIfHolder},
	{"DeleteIfRacesAcquire", testDeleteIfRacesAcquire},
}

// The records DeleteIf meets, as testDeleteIfStates makes them.
const (
	live    = "live"    // processing under a live lease
	ended   = "ended"   // processing, its lease ended, not taken over
	done    = "done"    // completed
	failing = "failing" // failed
)

var deleteKinds = []string{live, ended, done, failing}

// testDeleteIfStates runs every request against every kind of record and
// requires that exactly the allowed ones go, reporting the record found.
func testDeleteIfStates(t *testing.T, f *fixture) {
	in := f.inspector(t)
	requests := []struct {
		name    string
		req     store.DeleteRequest
		deletes []string // the kinds the request deletes
	}{
		{"default", store.DeleteRequest{}, []string{done, failing}},
		{"expired", store.DeleteRequest{ExpiredLease: true}, []string{ended, done, failing}},
		{"completed", store.DeleteRequest{States: []store.State{store.StateCompleted}}, []string{done}},
		{"failed", store.DeleteRequest{States: []store.State{store.StateFailed}}, []string{failing}},
		{"failed+expired", store.DeleteRequest{States: []store.State{store.StateFailed}, ExpiredLease: true}, []string{ended, failing}},
		{"processing", store.DeleteRequest{States: []store.State{store.StateProcessing}}, []string{live, ended}},
		{"all", store.DeleteRequest{States: []store.State{store.StateProcessing, store.StateCompleted, store.StateFailed}}, deleteKinds},
	}
	key := func(req, kind string) string { return f.key(req + ":" + kind) }

	// The ended leases first, a tick long, then the clock moves past them
	// and the other records are made: their lease and retention of ten
	// ticks outlive the checks.
	tokens := map[string]store.Token{}
	for _, r := range requests {
		k := key(r.name, ended)
		c := f.acquireFor(t, k, "", f.tick)
		require.True(t, c.Acquired)
		tokens[k] = c.Token
	}
	f.advance(2 * f.tick)
	for _, r := range requests {
		k := key(r.name, live)
		tokens[k] = f.claim(t, k).Token
		k = key(r.name, done)
		f.complete(t, k, f.claim(t, k).Token, []byte("x"))
		k = key(r.name, failing)
		f.release(t, k, f.claim(t, k).Token, "boom")
	}
	state := map[string]store.State{live: store.StateProcessing, ended: store.StateProcessing, done: store.StateCompleted, failing: store.StateFailed}

	for _, r := range requests {
		for _, kind := range deleteKinds {
			k := key(r.name, kind)
			want := false
			for _, d := range r.deletes {
				want = want || d == kind
			}
			req := r.req
			req.Key = k
			deleted, rec, err := in.DeleteIf(f.ctx, req)
			if errors.Is(err, store.ErrNotFound) {
				f.failOnTime(t, f.deadlines[k], "DeleteIf(%s) of the %s record: %v", r.name, kind, err)
			}
			require.NoError(t, err, "DeleteIf(%s) of the %s record", r.name, kind)
			require.Equal(t, k, rec.Key, "DeleteIf(%s) of the %s record: the record found", r.name, kind)
			require.Equal(t, state[kind], rec.State, "DeleteIf(%s) of the %s record: the record found", r.name, kind)
			require.Equal(t, 1, rec.Attempt, "DeleteIf(%s) of the %s record: the record found", r.name, kind)
			if kind == ended && want {
				require.Falsef(t, rec.LeaseUntil.IsZero(), "DeleteIf(%s) of a claim reports its lease", r.name)
			}
			if want {
				require.True(t, deleted, "DeleteIf(%s) must delete the %s record", r.name, kind)
				requireNotFound(t, in, f, k)
				c := f.claim(t, k)
				require.Equal(t, 1, c.Record.Attempt, "a deleted record is forgotten: the next claim is attempt 1")
				continue
			}
			// A live claim kept past its lease is the store's right.
			f.expectKept(t, k, !deleted, "DeleteIf(%s) must keep the %s record", r.name, kind)
			got, err := in.Get(f.ctx, k)
			require.NoError(t, err, "Get(%q) of a record DeleteIf(%s) kept", k, r.name)
			require.Equal(t, state[kind], got.State, "DeleteIf(%s) changed the %s record", r.name, kind)
		}
	}
}

// testDeleteIfAbsent: no record, or one past its retention, is
// ErrNotFound whatever the request; an empty key is ErrInvalidKey.
func testDeleteIfAbsent(t *testing.T, f *fixture) {
	in := f.inspector(t)
	for _, req := range []store.DeleteRequest{
		{Key: f.key("never")},
		{Key: f.key("never"), ExpiredLease: true},
		{Key: f.key("never"), States: []store.State{store.StateProcessing, store.StateCompleted, store.StateFailed}},
	} {
		deleted, rec, err := in.DeleteIf(f.ctx, req)
		require.ErrorIs(t, err, store.ErrNotFound, "DeleteIf(%+v) of an absent key", req)
		require.False(t, deleted)
		require.Zero(t, rec, "DeleteIf of an absent key reports no record")
	}

	gone := f.key("gone")
	f.complete(t, gone, f.claim(t, gone).Token, []byte("x"))
	f.advance(f.retention())
	_, _, err := in.DeleteIf(f.ctx, store.DeleteRequest{Key: gone})
	require.ErrorIs(t, err, store.ErrNotFound, "DeleteIf of a record past its retention")

	_, _, err = in.DeleteIf(f.ctx, store.DeleteRequest{})
	require.ErrorIs(t, err, store.ErrInvalidKey, "DeleteIf of an empty key")

	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	_, _, err = in.DeleteIf(ctx, store.DeleteRequest{Key: f.key("canceled")})
	require.ErrorIs(t, err, context.Canceled)
}

// testDeleteIfHolder: a refused DeleteIf leaves the holder its claim, and
// the holder of a claim DeleteIf deleted is fenced off.
func testDeleteIfHolder(t *testing.T, f *fixture) {
	in := f.inspector(t)
	key := f.key("held")
	c := f.claim(t, key)
	deleted, rec, err := in.DeleteIf(f.ctx, store.DeleteRequest{Key: key, ExpiredLease: true})
	require.NoError(t, err)
	f.expectKept(t, key, !deleted, "DeleteIf must not delete a claim under a live lease")
	require.Equal(t, store.StateProcessing, rec.State)
	requireSameTime(t, c.Record.LeaseUntil, rec.LeaseUntil, "DeleteIf reports the holder's lease")
	f.requireHeld(t, key, 1)
	f.complete(t, key, c.Token, []byte("ok"))
	f.requireCompleted(t, key, []byte("ok"))

	// Its lease ended: the claim goes, and its holder can no longer settle.
	late := f.key("late")
	c = f.acquireFor(t, late, "", f.tick)
	require.True(t, c.Acquired)
	f.advance(2 * f.tick)
	deleted, _, err = in.DeleteIf(f.ctx, store.DeleteRequest{Key: late, ExpiredLease: true})
	require.NoError(t, err)
	require.True(t, deleted, "DeleteIf must delete a claim whose lease ended")
	requireLeaseLost(t, f.store.Complete(f.ctx, f.completeRequest(late, c.Token, "late")), "Complete of a claim DeleteIf deleted")
	requireLeaseLost(t, f.store.Extend(f.ctx, f.extendRequest(late, c.Token)), "Extend of a claim DeleteIf deleted")
	require.Equal(t, 1, f.claim(t, late).Record.Attempt, "a deleted claim is forgotten")
}

// testDeleteIfRacesAcquire: DeleteIf of ended leases races Acquires that
// take them over. Each Acquire claims the key (a takeover, or afresh after
// the delete), and the claim is never deleted: its holder completes. A
// DeleteIf that read the record and deleted it apart, not in one step,
// deletes a claim made in between.
func testDeleteIfRacesAcquire(t *testing.T, f *fixture) {
	in := f.inspector(t)
	const n = 32
	keys := f.raceKeys("delete-race", n)
	for _, key := range keys {
		require.True(t, f.acquireFor(t, key, "", f.tick).Acquired)
	}
	f.advance(2 * f.tick)

	type outcome struct {
		claim   store.Claim
		err     error
		deleted bool
		rec     store.Record
		delErr  error
	}
	outcomes := make([]outcome, n)
	var deadline time.Time // the racers' claims hold until then at least
	if f.now != nil {
		deadline = f.now().Truncate(f.resolution).Add(f.lease())
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, key := range keys {
		wg.Go(func() {
			<-start
			outcomes[i].claim, outcomes[i].err = f.store.Acquire(f.ctx, store.AcquireRequest{Key: key, Lease: f.lease()})
		})
		wg.Go(func() {
			<-start
			outcomes[i].deleted, outcomes[i].rec, outcomes[i].delErr = in.DeleteIf(f.ctx, store.DeleteRequest{Key: key, ExpiredLease: true})
		})
	}
	close(start)
	wg.Wait()

	for i, key := range keys {
		o := outcomes[i]
		require.NoError(t, o.err, "Acquire(%q)", key)
		require.True(t, o.claim.Acquired, "Acquire(%q) of an ended lease, deleted or not, claims the key", key)
		require.NoError(t, o.delErr, "DeleteIf(%q)", key)
		if o.deleted {
			// The ended claim was attempt 1; the takeover is attempt 2.
			require.Equal(t, 1, o.rec.Attempt, "DeleteIf(%q) deleted the racing claim: %s", key, describe(o.rec))
			require.Equal(t, 1, o.claim.Record.Attempt, "Acquire(%q) after DeleteIf deleted the ended claim claims afresh", key)
		}
		err := f.store.Complete(f.ctx, f.completeRequest(key, o.claim.Token, "ok"))
		f.expect(t, err == nil, deadline, "Complete(%q) of the claim that raced DeleteIf (deleted %v): %v", key, o.deleted, err)
	}
}

func describe(rec store.Record) string {
	return fmt.Sprintf("a %s record, attempt %d, lease until %v", rec.State, rec.Attempt, rec.LeaseUntil)
}
