package mysqlstore_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/mysqlstore"
)

// TestStalledClaimerKeepsItsClaim: a claimer that stalls between its claim
// statement and the read of the row it left, for longer than its lease,
// while another claimer takes the key over, is still answered with its
// own claim: the attempt it counted, under its own token. Neither an
// attempt counted without a claim granted for it, nor a "held" answer
// about its own claim (the claim and its answer are one atomic step).
func TestStalledClaimerKeepsItsClaim(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	staller, other := d.store(t, nil), d.store(t, nil)
	ctx := t.Context()
	const key = "stalled"

	// A failed record: the staller's claim is a takeover (the claim
	// statement, not the INSERT of a new key).
	first, err := other.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, first.Acquired)
	require.NoError(t, other.Release(ctx, store.ReleaseRequest{Key: key, Token: first.Token, Error: "boom", Retention: time.Hour}))

	type answer struct {
		c   store.Claim
		err error
	}
	rival := make(chan answer, 1)
	var once sync.Once
	mysqlstore.StallClaims(staller, func() {
		once.Do(func() {
			// Stall past the staller's lease on the database's clock,
			// then let a rival claim the key: it either finishes (the
			// staller's claim was already visible and over) or waits for
			// the staller's row lock.
			waitDBTime(t, d.db, dbNow(t, d.db).Add(2*time.Millisecond))
			go func() {
				c, err := other.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
				rival <- answer{c, err}
			}()
			waitRivalOrLockWait(t, d, rival)
		})
	})

	token := store.NewToken()
	c, err := staller.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Millisecond, Token: token})
	require.NoError(t, err)
	require.True(t, c.Acquired, "the stalled claimer took the key over: it must be answered with its claim, not a %s record", c.Record.State)
	require.Equal(t, token, c.Token)
	require.Equal(t, 2, c.Record.Attempt, "the stalled claim is the second attempt")

	r := testenv.Recv(t, rival, "the rival's Acquire")
	require.NoError(t, r.err)
	want := 2
	if r.c.Acquired {
		// The staller's 1 ms lease had ended by the rival's claim.
		require.Equal(t, 3, r.c.Record.Attempt, "the rival's takeover counts one attempt after the staller's")
		want = 3
	} else {
		require.Equal(t, store.StateProcessing, r.c.Record.State)
		require.Equal(t, 2, r.c.Record.Attempt)
	}
	rec, err := other.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, want, rec.Attempt, "every attempt counted is a claim granted")
}

// waitRivalOrLockWait waits until the rival's claim has answered or
// waits for a row lock of d's database.
func waitRivalOrLockWait[T any](t testing.TB, d *testDB, rival chan T) {
	t.Helper()
	deadline := time.Now().Add(testenv.WaitTimeout)
	for len(rival) == 0 && lockWaits(t, d) == 0 {
		require.True(t, time.Now().Before(deadline), "the rival's claim neither answered nor waited for a lock")
		time.Sleep(time.Millisecond)
	}
}
