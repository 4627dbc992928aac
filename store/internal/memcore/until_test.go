package memcore

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/clock"
)

func TestUntil(t *testing.T) {
	t.Parallel()
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	c := clock.NewFake(start)
	require.Equal(t, time.Minute, until(c, start.Add(time.Minute)))
	c.Advance(2 * time.Minute)
	require.Equal(t, -time.Minute, until(c, start.Add(time.Minute)))

	// On the real clock it reads the monotonic clock: bracket the answer
	// by readings before and after, which no delay can break.
	before := time.Now()
	d := until(clock.Real(), before.Add(time.Hour))
	elapsed := time.Since(before)
	require.LessOrEqual(t, d, time.Hour)
	require.GreaterOrEqual(t, d, time.Hour-elapsed)
}

// uncomparable is a Clock whose dynamic type cannot be compared: until
// must not panic on it.
type uncomparable struct {
	clock.Clock
	_ []int
}

func TestUntilUncomparableClock(t *testing.T) {
	t.Parallel()
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	c := uncomparable{Clock: clock.NewFake(start)}
	require.Equal(t, time.Second, until(c, start.Add(time.Second)))
}
