package storetest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
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
	c := f.claim(t, key)
	require.Equal(t, key, c.Record.Key)
	require.Equal(t, 1, c.Record.Attempt)
	require.Empty(t, c.Record.Result)
	f.requireFromNow(t, f.lease(), c.Record.LeaseUntil, "LeaseUntil of a new claim")

	// The lease counts from the claim: a longer lease ends later by the
	// difference, whatever the store's clock reads.
	long, err := f.store.Acquire(f.ctx, f.key("absent-long"), dedup.AcquireRequest{Lease: 3 * f.lease()})
	require.NoError(t, err)
	require.True(t, long.Acquired)
	f.requireAbout(t, c.Record.LeaseUntil.Add(2*f.lease()), long.Record.LeaseUntil, "LeaseUntil of a claim with a longer lease")
	require.NotEqual(t, c.Token, long.Token, "every claim needs its own token")
}

func testAcquireHeld(t *testing.T, f *fixture) {
	key := f.key("held")
	first := f.claim(t, key)

	second := f.acquire(t, key, "")
	require.False(t, second.Acquired, "a held key was claimed twice")
	require.True(t, second.Token.IsZero(), "a claim that is not acquired has no token")
	require.Equal(t, dedup.StateProcessing, second.Record.State)
	require.Equal(t, key, second.Record.Key)
	require.Equal(t, first.Record.Attempt, second.Record.Attempt, "a refused Acquire must not count an attempt")
	f.requireAbout(t, first.Record.LeaseUntil, second.Record.LeaseUntil, "a refused Acquire reports the holder's lease")

	// The refused Acquire changed nothing: the holder still completes.
	f.complete(t, key, first.Token, []byte("ok"))
	f.requireCompleted(t, key, []byte("ok"))
}

// racers is how many goroutines race for one key.
const racers = 64

// race runs racers concurrent Acquires of key, released at once, and
// returns their claims. Goroutines only record; the test goroutine asserts.
func (f *fixture) race(t *testing.T, keys []string) map[string][]dedup.Claim {
	t.Helper()
	type outcome struct {
		key   string
		claim dedup.Claim
		err   error
	}
	outcomes := make([]outcome, len(keys)*racers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range outcomes {
		key := keys[i%len(keys)]
		wg.Go(func() {
			<-start
			c, err := f.store.Acquire(f.ctx, key, dedup.AcquireRequest{Lease: f.lease()})
			outcomes[i] = outcome{key: key, claim: c, err: err}
		})
	}
	close(start)
	wg.Wait()

	claims := make(map[string][]dedup.Claim, len(keys))
	for _, o := range outcomes {
		require.NoError(t, o.err, "concurrent Acquire(%q)", o.key)
		claims[o.key] = append(claims[o.key], o.claim)
	}
	return claims
}

// requireOneWinner requires that exactly one of claims acquired, with
// attempt, and that every loser saw the winner's processing record.
func requireOneWinner(t *testing.T, key string, claims []dedup.Claim, attempt int) dedup.Claim {
	t.Helper()
	var winners []dedup.Claim
	for _, c := range claims {
		require.Equal(t, dedup.StateProcessing, c.Record.State, "every racer for %q sees a processing record", key)
		require.Equal(t, attempt, c.Record.Attempt, "every racer for %q sees the winner's attempt", key)
		if c.Acquired {
			winners = append(winners, c)
			continue
		}
		require.True(t, c.Token.IsZero(), "a claim that is not acquired has no token")
	}
	require.Len(t, winners, 1, "%d concurrent Acquires of %q: exactly one must claim it", len(claims), key)
	require.False(t, winners[0].Token.IsZero())
	return winners[0]
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
		w := requireOneWinner(t, key, claims[key], 1)
		f.complete(t, key, w.Token, []byte(key))
		f.requireCompleted(t, key, []byte(key))
	}
}

func testTakeoverContention(t *testing.T, f *fixture) {
	keys := f.raceKeys("takeover", 4)
	old := make(map[string]dedup.Token, len(keys))
	for _, key := range keys {
		old[key] = f.claim(t, key).Token
	}
	f.advance(f.lease() + f.tick)
	claims := f.race(t, keys)
	for _, key := range keys {
		w := requireOneWinner(t, key, claims[key], 2)
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
		requireOneWinner(t, key, claims[key], 2)
	}
}
