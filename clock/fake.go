package clock

import (
	"slices"
	"sync"
	"time"
)

// Fake is a [Clock] that moves only when told to. Functions scheduled with
// AfterFunc run when Advance or Set passes their deadline, in deadline order,
// on the goroutine that moved the clock, after the clock's lock is released.
// It is safe for concurrent use.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers []*fakeTimer
}

// NewFake returns a fake clock showing start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// Now returns the fake time.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f to run once the fake time reaches Now()+d. A
// non-positive d makes f due at the next Advance (even by zero).
func (c *Fake) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &fakeTimer{clock: c, when: c.now.Add(d), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return t
}

// Advance moves the clock forward by d and runs every function now due.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	c.Set(target)
}

// Set moves the clock to t (never backwards) and runs every function due by
// then. The clock steps to each function's deadline before running it, so a
// function that schedules another (a heartbeat re-arming itself) sees the
// time it was due at, and the new one runs too if it falls due by t.
func (c *Fake) Set(t time.Time) {
	for {
		c.mu.Lock()
		due := c.popDue(t)
		if due == nil {
			if t.After(c.now) {
				c.now = t
			}
			c.mu.Unlock()
			return
		}
		if due.when.After(c.now) {
			c.now = due.when
		}
		c.mu.Unlock()
		due.f()
	}
}

// Pending returns how many scheduled functions have not run yet.
func (c *Fake) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// popDue removes and returns the earliest timer due by until, or nil.
func (c *Fake) popDue(until time.Time) *fakeTimer {
	i := -1
	for j, t := range c.timers {
		if t.when.After(until) {
			continue
		}
		if i < 0 || t.when.Before(c.timers[i].when) || (t.when.Equal(c.timers[i].when) && t.seq < c.timers[i].seq) {
			i = j
		}
	}
	if i < 0 {
		return nil
	}
	t := c.timers[i]
	c.timers = slices.Delete(c.timers, i, i+1)
	return t
}

type fakeTimer struct {
	clock *Fake
	when  time.Time
	seq   uint64
	f     func()
}

func (t *fakeTimer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.timers, t)
	if i < 0 {
		return false
	}
	c.timers = slices.Delete(c.timers, i, i+1)
	return true
}
