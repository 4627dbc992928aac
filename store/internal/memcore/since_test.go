package memcore

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/clock"
)

func TestSince(t *testing.T) {
	t.Parallel()
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	c := clock.NewFake(start)
	require.Equal(t, -time.Minute, since(c, start.Add(time.Minute)))
	c.Advance(2 * time.Minute)
	require.Equal(t, time.Minute, since(c, start.Add(time.Minute)))

	// On the real clock it reads the monotonic clock: bracket the answer
	// by readings before and after, which no delay can break.
	before := time.Now()
	inner := time.Now()
	d := since(clock.Real(), inner)
	elapsed := time.Since(before)
	require.GreaterOrEqual(t, d, time.Duration(0))
	require.LessOrEqual(t, d, elapsed)
}

// uncomparable is a Clock whose dynamic type cannot be compared: since
// must not panic on it.
type uncomparable struct {
	clock.Clock
	_ []int
}

func TestSinceUncomparableClock(t *testing.T) {
	t.Parallel()
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	c := uncomparable{Clock: clock.NewFake(start)}
	require.Equal(t, -time.Second, since(c, start.Add(time.Second)))
}
