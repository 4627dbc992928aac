package clock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dedup-go/dedup/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestFakeRunsDueFunctionsInOrder(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(start)
	var got []string
	c.AfterFunc(3*time.Second, func() { got = append(got, "3s") })
	c.AfterFunc(time.Second, func() { got = append(got, "1s-a") })
	c.AfterFunc(time.Second, func() { got = append(got, "1s-b") })
	c.AfterFunc(10*time.Second, func() { got = append(got, "10s") })
	require.Equal(t, 4, c.Pending())

	c.Advance(999 * time.Millisecond)
	require.Empty(t, got, "nothing is due yet")
	c.Advance(5 * time.Second)
	require.Equal(t, []string{"1s-a", "1s-b", "3s"}, got, "deadline order, then scheduling order")
	require.Equal(t, start.Add(5999*time.Millisecond), c.Now())
	require.Equal(t, 1, c.Pending())
}

func TestFakeStop(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(start)
	ran := false
	tm := c.AfterFunc(time.Second, func() { ran = true })
	require.True(t, tm.Stop())
	require.False(t, tm.Stop(), "a second Stop finds nothing to stop")
	c.Advance(time.Hour)
	require.False(t, ran)

	fired := c.AfterFunc(time.Second, func() {})
	c.Advance(time.Second)
	require.False(t, fired.Stop(), "Stop after the call ran")
}

// A function that schedules another, due within the same Advance, sees it
// run too: that is how the receiver's heartbeat re-arms itself.
func TestFakeRunsFunctionsScheduledWhileAdvancing(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(start)
	beats := 0
	var beat func()
	beat = func() {
		beats++
		c.AfterFunc(time.Second, beat)
	}
	c.AfterFunc(time.Second, beat)
	c.Advance(3500 * time.Millisecond)
	require.Equal(t, 3, beats)
	require.Equal(t, 1, c.Pending())
}

func TestFakeNeverGoesBackwards(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(start)
	c.Set(start.Add(-time.Hour))
	require.Equal(t, start, c.Now())
	c.AfterFunc(0, func() {})
	c.Advance(0)
	require.Zero(t, c.Pending(), "a zero delay is due at the next Advance")
}

func TestFakeConcurrentUse(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(start)
	var wg sync.WaitGroup
	var mu sync.Mutex
	n := 0
	for range 8 {
		wg.Go(func() {
			for range 100 {
				c.AfterFunc(time.Millisecond, func() { mu.Lock(); n++; mu.Unlock() })
				c.Advance(time.Millisecond)
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	c.Advance(time.Second)
	require.Equal(t, 800, n)
}

func TestRealAfterFunc(t *testing.T) {
	t.Parallel()
	done := make(chan struct{})
	clock.Real().AfterFunc(time.Millisecond, func() { close(done) })
	<-done
	require.True(t, clock.Real().AfterFunc(time.Hour, func() {}).Stop())
}
