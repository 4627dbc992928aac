package storetest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
)

// acquireCases pin the claim itself: what a first and a second Acquire see,
// and that exactly one of many concurrent Acquires wins.
var acquireCases = []testCase{
	{"Absent", testAcquireAbsent},
	{"Held", testAcquireHeld},
	{"Contention", testAcquireContention},
	{"ContentionOnTakeover", testTakeoverContention},
	{"ContentionAfterRelease", testReleaseContention},
}

func testAcquireAbsent(t *testing.T, f *fixture) {
	key := f.key("absent")
	c := f.claim(t, key) // checks LeaseUntil against the store's clock
	require.Equal(t, key, c.Record.Key)
	require.Equal(t, 1, c.Record.Attempt)
	require.Empty(t, c.Record.Result)

	// The lease counts from the claim: a longer lease claimed later ends at
	// least the difference later, however long the calls took.
	long := f.acquireFor(t, f.key("absent-long"), "", 3*f.lease())
	require.True(t, long.Acquired)
	requireClaimed(t, long)
	earliest := c.Record.LeaseUntil.Add(2 * f.lease())
	require.Falsef(t, long.Record.LeaseUntil.Before(earliest),
		"a lease of %v claimed after one of %v ends at %v, before %v", 3*f.lease(), f.lease(), long.Record.LeaseUntil, earliest)
	require.NotEqual(t, c.Token, long.Token, "every claim needs its own token")
}

func testAcquireHeld(t *testing.T, f *fixture) {
	key := f.key("held")
	first := f.claim(t, key)

	second := f.requireHeld(t, key, first.Record.Attempt) // a refused Acquire counts no attempt
	require.Equal(t, key, second.Key)
	requireSameTime(t, first.Record.LeaseUntil, second.LeaseUntil, "a refused Acquire reports the holder's lease")

	// The refused Acquire changed nothing: the holder still completes.
	f.complete(t, key, first.Token, []byte("ok"))
	f.requireCompleted(t, key, []byte("ok"))
}

// racers is how many goroutines race for one key.
const racers = 64

// race runs racers concurrent Acquires of key, released at once, and
// returns their claims. Goroutines only record; the test goroutine asserts.
func (f *fixture) race(t *testing.T, keys []string) map[string][]store.Claim {
	t.Helper()
	type outcome struct {
		key   string
		claim store.Claim
		err   error
	}
	outcomes := make([]outcome, len(keys)*racers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range outcomes {
		key := keys[i%len(keys)]
		wg.Go(func() {
			<-start
			c, err := f.store.Acquire(f.ctx, store.AcquireRequest{Key: key, Lease: f.lease()})
			outcomes[i] = outcome{key: key, claim: c, err: err}
		})
	}
	close(start)
	wg.Wait()

	claims := make(map[string][]store.Claim, len(keys))
	for _, o := range outcomes {
		require.NoError(t, o.err, "concurrent Acquire(%q)", o.key)
		claims[o.key] = append(claims[o.key], o.claim)
	}
	return claims
}

// requireOneWinner requires that exactly one of claims acquired, with
// attempt, and that every loser saw the winner's processing record.
func (f *fixture) requireOneWinner(t *testing.T, key string, claims []store.Claim, attempt int) store.Claim {
	t.Helper()
	var winners []store.Claim
	for _, c := range claims {
		if c.Acquired {
			winners = append(winners, c)
		}
	}
	require.NotEmpty(t, winners, "%d concurrent Acquires of %q: one must claim it", len(claims), key)
	// Two winners, or attempts other than expected, are legitimate only
	// once the first winner's lease or the record the race replaced ended.
	//
	// The race replaced a record only when one was noted for key; a new
	// key's deadline is its first winner's lease alone (a later winner can
	// only have taken it over once that ran out, the machine being slow
	// to hand out connections). Winners that share an attempt number did
	// not take over from each other: that fails whatever the clock says.
	deadline := f.deadlines[key]
	attempts := map[int]bool{}
	for i, w := range winners {
		if i == 0 && deadline.IsZero() {
			deadline = w.Record.LeaseUntil
		}
		deadline = earlier(deadline, w.Record.LeaseUntil)
		require.False(t, attempts[w.Record.Attempt], "%d concurrent Acquires of %q: %d claimed it, two of them as attempt %d", len(claims), key, len(winners), w.Record.Attempt)
		attempts[w.Record.Attempt] = true
	}
	f.expect(t, len(winners) == 1, deadline, "%d concurrent Acquires of %q: exactly one must claim it, %d did (attempts %v)", len(claims), key, len(winners), attempts)
	w := winners[0]
	require.False(t, w.Token.IsZero())
	for _, c := range claims {
		require.Equal(t, store.StateProcessing, c.Record.State, "every racer for %q sees a processing record", key)
		f.expect(t, c.Record.Attempt == attempt, deadline, "a racer for %q saw attempt %d, want the winner's %d", key, c.Record.Attempt, attempt)
		if !c.Acquired {
			require.True(t, c.Token.IsZero(), "a claim that is not acquired has no token")
		}
	}
	f.note(key, w.Record.LeaseUntil)
	return w
}

func (f *fixture) raceKeys(name string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = f.key(fmt.Sprintf("%s-%d", name, i))
	}
	return keys
}

func testAcquireContention(t *testing.T, f *fixture) {
	keys := f.raceKeys("race", 8)
	claims := f.race(t, keys)
	for _, key := range keys {
		w := f.requireOneWinner(t, key, claims[key], 1)
		f.complete(t, key, w.Token, []byte(key))
		f.requireCompleted(t, key, []byte(key))
	}
}

func testTakeoverContention(t *testing.T, f *fixture) {
	keys := f.raceKeys("takeover", 4)
	old := make(map[string]store.Token, len(keys))
	for _, key := range keys {
		old[key] = f.claim(t, key).Token
	}
	f.advance(f.lease())
	claims := f.race(t, keys)
	for _, key := range keys {
		w := f.requireOneWinner(t, key, claims[key], 2)
		require.NotEqual(t, old[key], w.Token)
	}
}

func testReleaseContention(t *testing.T, f *fixture) {
	keys := f.raceKeys("released", 4)
	for _, key := range keys {
		f.release(t, key, f.claim(t, key).Token, "boom")
	}
	claims := f.race(t, keys)
	for _, key := range keys {
		f.requireOneWinner(t, key, claims[key], 2)
	}
}
