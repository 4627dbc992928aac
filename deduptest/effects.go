package deduptest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Effects counts effects by message id, for handlers to record theirs
// and Run to check (Options.Effects = e.Count), or ExactlyOnce when a
// real broker or client delivered the messages.
//
// It counts the effects of a handler's recorded steps too (dedup.Step),
// and of the compensations that undo them (dedup.Compensate), by message
// id and step name: a step's function calls Step where its effect
// happens, a compensation calls Compensation where it undoes one, and Run
// (Options.Steps = e) or ExactlyOnce checks that each step's effect
// happened at most once (DoubleStep), each compensation ran at most once
// (DoubleCompensation), and none ran without its step's effect before it
// (CompensationWithoutStep). It is safe for concurrent use; the zero
// value is ready.
type Effects struct {
	mu    sync.Mutex
	n     map[string]int
	seq   uint64 // orders the step and compensation effects
	steps map[string]map[string]*stepEffects
}

// stepEffects counts the effects of one step of one message, and of its
// compensation, with the order of the first of each.
type stepEffects struct {
	steps, compensations         int
	firstStep, firstCompensation uint64
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

// Step counts one effect of the step name of the message id: call it
// where the step's function does its effect, for Run (Options.Steps) or
// ExactlyOnce to check that it happened once.
func (e *Effects) Step(id, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	se := e.step(id, name)
	e.seq++
	if se.steps == 0 {
		se.firstStep = e.seq
	}
	se.steps++
}

// Compensation counts one run of the compensation of the step name of
// the message id: call it where the compensation undoes the step's
// effect. A compensation counted before any effect of its step (or
// without one) is a CompensationWithoutStep problem.
func (e *Effects) Compensation(id, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	se := e.step(id, name)
	e.seq++
	if se.compensations == 0 {
		se.firstCompensation = e.seq
	}
	se.compensations++
}

// step returns the counts of step name of id, made on first use. It is
// called with mu held.
func (e *Effects) step(id, name string) *stepEffects {
	if e.steps == nil {
		e.steps = make(map[string]map[string]*stepEffects)
	}
	byName := e.steps[id]
	if byName == nil {
		byName = make(map[string]*stepEffects)
		e.steps[id] = byName
	}
	se := byName[name]
	if se == nil {
		se = new(stepEffects)
		byName[name] = se
	}
	return se
}

// StepCount returns how many effects of the step name of the message id
// were recorded.
func (e *Effects) StepCount(id, name string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if se := e.steps[id][name]; se != nil {
		return se.steps
	}
	return 0
}

// CompensationCount returns how many runs of the compensation of the
// step name of the message id were recorded.
func (e *Effects) CompensationCount(id, name string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if se := e.steps[id][name]; se != nil {
		return se.compensations
	}
	return 0
}

// stepsOf returns, for the message id, the effects counted by step name
// and the compensations, each nil when none was recorded.
func (e *Effects) stepsOf(id string) (steps, compensations map[string]int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	byName := e.steps[id]
	if len(byName) == 0 {
		return nil, nil
	}
	for name, se := range byName {
		if se.steps > 0 {
			if steps == nil {
				steps = map[string]int{}
			}
			steps[name] = se.steps
		}
		if se.compensations > 0 {
			if compensations == nil {
				compensations = map[string]int{}
			}
			compensations[name] = se.compensations
		}
	}
	return steps, compensations
}

// stepIDs returns the ids of the messages that have step or compensation
// effects recorded, sorted.
func (e *Effects) stepIDs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	ids := make([]string, 0, len(e.steps))
	for id := range e.steps {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// stepProblems returns the problems of the steps of the message id, by
// step name: DoubleStep, DoubleCompensation, CompensationWithoutStep.
func (e *Effects) stepProblems(id string) []Problem {
	e.mu.Lock()
	byName := e.steps[id]
	names := make([]string, 0, len(byName))
	counts := make(map[string]stepEffects, len(byName))
	for name, se := range byName {
		names = append(names, name)
		counts[name] = *se
	}
	e.mu.Unlock()
	slices.Sort(names)
	var out []Problem
	add := func(k ProblemKind, format string, args ...any) {
		out = append(out, Problem{ID: id, Kind: k, Detail: fmt.Sprintf(format, args...)})
	}
	for _, name := range names {
		se := counts[name]
		if se.steps > 1 {
			add(DoubleStep, "the effect of step %q happened %d times: an effect outside the step's function (or done twice inside it), "+
				"or a crash, a lost lease or a store failure between the effect and the step's record "+
				"(the window steps narrow, not close: an idempotency key from dedup.OutgoingID closes it)", name, se.steps)
		}
		switch {
		case se.compensations > 0 && se.steps == 0:
			add(CompensationWithoutStep, "the compensation of step %q ran (%s), but the step's effect never happened: "+
				"a compensation runs only for a step that completed", name, times(se.compensations))
		case se.compensations > 0 && se.firstCompensation < se.firstStep:
			add(CompensationWithoutStep, "the compensation of step %q ran before the step's effect happened: "+
				"the step ran after its compensation (a step of a message given up must be refused)", name)
		}
		if se.compensations > 1 {
			add(DoubleCompensation, "the compensation of step %q ran %d times: a crash, a lost lease or a store failure "+
				"between its effect and its record runs it again; make it idempotent (a refund keyed on the charge)", name, se.compensations)
		}
	}
	return out
}

// times is "once" or "n times".
func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
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
// was to have no effect, such as a poison message). When step effects
// were recorded (Step, Compensation), the Report has the problems of the
// steps of every message that has some, expected or not (a poison
// message's steps may be compensated): double-step, double-compensation
// and compensation-without-step, and each expected id's MessageReport has
// its Steps and Compensations; ids are those whose Record effect is
// expected, so a test that counts steps alone calls ExactlyOnce without
// any. Check it, or assert on it, as Run's; an id given twice counts
// once.
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
		steps, comps := e.stepsOf(id)
		rep.Messages = append(rep.Messages, MessageReport[struct{}]{ID: id, Index: len(rep.Messages), Effects: n, Steps: steps, Compensations: comps})
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
		rep.Problems = append(rep.Problems, Problem{ID: id, Kind: UnexpectedEffect,
			Detail: "the effect happened " + times(counts[id]) + ", but the message was not among those expected to have one"})
	}
	// The step problems: of the expected ids in their order, then of the
	// others.
	stepIDs := e.stepIDs()
	rep.stepsChecked = len(stepIDs) > 0
	for _, m := range rep.Messages {
		rep.Problems = append(rep.Problems, e.stepProblems(m.ID)...)
	}
	for _, id := range stepIDs {
		if !expected[id] {
			rep.Problems = append(rep.Problems, e.stepProblems(id)...)
		}
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
	if r.stepsChecked {
		fmt.Fprintf(b, "steps: %d more than once, %d compensations more than once, %d compensations without their step\n",
			len(r.ProblemsOf(DoubleStep)), len(r.ProblemsOf(DoubleCompensation)), len(r.ProblemsOf(CompensationWithoutStep)))
	}
}
