package deduptest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Effects counts effects by message id, for handlers to record theirs
// and Run to check (Options.Effects = e.Count), or ExactlyOnce when a
// real broker or client delivered the messages. It is safe for
// concurrent use; the zero value is ready.
type Effects struct {
	mu sync.Mutex
	n  map[string]int
}

// Record counts one effect of the message id.
func (e *Effects) Record(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = make(map[string]int)
	}
	e.n[id]++
}

// Count returns how many effects of the message id were recorded.
func (e *Effects) Count(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[id]
}

// Len returns how many messages had an effect: the distinct ids recorded
// (what a test polls while a broker delivers).
func (e *Effects) Len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.n)
}

// ExactlyOnce checks the effects recorded against ids, the messages whose
// effect must have happened once, for a test in which something else
// than Run delivered them: a real broker, or an HTTP or gRPC client. The
// Report has a MessageReport per id, with its Effects and no deliveries,
// and the problems found, worded as Run's: double-effect (more than
// once), no-effect (never: the message was lost), and unexpected-effect
// for an id recorded but not among ids (a message never sent, or one that
// was to have no effect, such as a poison message). Check it, or assert
// on it, as Run's; an id given twice counts once.
func (e *Effects) ExactlyOnce(ids ...string) *Report[struct{}] {
	e.mu.Lock()
	counts := make(map[string]int, len(e.n))
	for id, n := range e.n {
		counts[id] = n
	}
	e.mu.Unlock()
	rep := &Report[struct{}]{effectsOnly: true}
	expected := make(map[string]bool, len(ids))
	for _, id := range ids {
		if expected[id] {
			continue
		}
		expected[id] = true
		n := counts[id]
		rep.Messages = append(rep.Messages, MessageReport[struct{}]{ID: id, Index: len(rep.Messages), Effects: n})
		switch {
		case n > 1:
			rep.Problems = append(rep.Problems, Problem{ID: id, Kind: DoubleEffect, Detail: fmt.Sprintf("the effect happened %d times", n)})
		case n == 0:
			rep.Problems = append(rep.Problems, Problem{ID: id, Kind: NoEffect, Detail: "the effect never happened (the message was lost)"})
		}
	}
	var unexpected []string
	for id := range counts {
		if !expected[id] {
			unexpected = append(unexpected, id)
		}
	}
	slices.Sort(unexpected)
	for _, id := range unexpected {
		times := "once"
		if n := counts[id]; n > 1 {
			times = fmt.Sprintf("%d times", n)
		}
		rep.Problems = append(rep.Problems, Problem{ID: id, Kind: UnexpectedEffect,
			Detail: "the effect happened " + times + ", but the message was not among those expected to have one"})
	}
	return rep
}

// summarizeEffects writes the one-line summary of a Report built by
// ExactlyOnce.
func (r *Report[R]) summarizeEffects(b *strings.Builder) {
	once := 0
	for _, m := range r.Messages {
		if m.Effects == 1 {
			once++
		}
	}
	fmt.Fprintf(b, "effects of %d messages expected once: %d once, %d more than once, %d never; %d unexpected\n",
		len(r.Messages), once, len(r.ProblemsOf(DoubleEffect)), len(r.ProblemsOf(NoEffect)), len(r.ProblemsOf(UnexpectedEffect)))
}
