package deduptest

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
)

// ProblemKind names what went wrong with a message.
type ProblemKind string

// The problems a Report finds.
const (
	// DoubleEffect: the effect counter shows the message's effect more
	// than once.
	DoubleEffect ProblemKind = "double-effect"
	// NoEffect: a copy of the message was acknowledged, yet the effect
	// counter shows its effect never happened.
	NoEffect ProblemKind = "no-effect"
	// WrongReplay: a duplicate was answered with another result than the
	// first delivery that ran the handler returned.
	WrongReplay ProblemKind = "wrong-replay"
	// Unsettled: a copy was neither acknowledged nor dead-lettered (it
	// ran out of MaxDeliveries, or the run ended first).
	Unsettled ProblemKind = "unsettled"
	// Stuck: a delivery was still running when the run ended, or did not
	// return once its context was cancelled (a handler ignoring
	// cancellation).
	Stuck ProblemKind = "stuck"
	// UnexpectedEffect: the effect counter shows an effect of a message
	// that was not to have one (Effects.ExactlyOnce: an id outside those
	// given).
	UnexpectedEffect ProblemKind = "unexpected-effect"
	// KeyDiffers: deliveries of one message were keyed differently (an id
	// taken from something that changes between sends or deliveries: a
	// delivery tag, a timestamp in a hashed body), so the receiver took
	// each key for a new message. The detail names two of the keys.
	KeyDiffers ProblemKind = "key-differs"
	// FaultNotInjected: a Fault of a FaultStore among Options.Faults was
	// never injected (no call matched it, or a call its Calls lists never
	// came): the run did not test what it asked for. Such a problem names
	// no message.
	FaultNotInjected ProblemKind = "fault-not-injected"
	// DoubleStep: the step counter (Options.Steps, Effects.Step) shows the
	// effect of one of the message's recorded steps (dedup.Step) more
	// than once. The detail names the step and how many times. A step runs
	// at most once per message and name, but for the window between its
	// effect and its record (a crash, a lost lease, a store failure then),
	// which an idempotency key closes; an effect done outside the step's
	// function is not a step's at all.
	DoubleStep ProblemKind = "double-step"
	// DoubleCompensation: the step counter shows the compensation of one
	// of the message's steps (dedup.Compensate, Effects.Compensation) run
	// more than once. The detail names the step and how many times.
	DoubleCompensation ProblemKind = "double-compensation"
	// CompensationWithoutStep: the compensation of one of the message's
	// steps ran although the step's effect never happened, or had not
	// happened yet (the step ran after its compensation). The detail names
	// the step.
	CompensationWithoutStep ProblemKind = "compensation-without-step"
)

// Problem is one thing the harness found wrong with a message, or with
// the run.
type Problem struct {
	// ID is the message's; empty for a problem of the run as a whole
	// (FaultNotInjected).
	ID   string
	Kind ProblemKind
	// Detail says what happened, for a person.
	Detail string
}

// String is "message <id>: <kind>: <detail>", or "<kind>: <detail>" for a
// problem that names no message.
func (p Problem) String() string {
	if p.ID == "" {
		return fmt.Sprintf("%s: %s", p.Kind, p.Detail)
	}
	return fmt.Sprintf("message %s: %s: %s", p.ID, p.Kind, p.Detail)
}

// DeliveryReport is one delivery of a copy of a message.
type DeliveryReport[R any] struct {
	// Copy is the copy's number, from 0.
	Copy int
	// Replica is the number of the replica the copy was delivered to
	// (see Replicas); 0 when Run was given a single target.
	Replica int
	// At is the fake time when the delivery answered.
	At time.Time
	// Key is the store key the receiver used.
	Key     string
	Status  delivery.Status
	Attempt int
	// Value is the result the delivery answered with (the replayed one for
	// a duplicate).
	Value    R
	Err      error
	Problem  error
	Decision delivery.Decision
	// Crashed: the worker crashed (a Crash fault dropped the completion,
	// or came after a step's record; or the handler returned an error
	// wrapping ErrCrashed); the delivery was not settled but redelivered
	// after the lease.
	Crashed bool

	replicated bool // the run had several replicas: String names this one's
}

// Ran reports whether the delivery ran the handler (whatever its outcome).
func (d DeliveryReport[R]) Ran() bool {
	if d.Status == delivery.StatusProcessed || d.Status == delivery.StatusBypassed {
		return true
	}
	var he *dedup.HandlerError
	return errors.As(d.Err, &he)
}

// String describes the delivery on one line.
func (d DeliveryReport[R]) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "copy %d", d.Copy)
	if d.replicated {
		fmt.Fprintf(&b, " on replica %d", d.Replica)
	}
	fmt.Fprintf(&b, ": %s", d.Status)
	if d.Attempt > 0 {
		fmt.Fprintf(&b, " (attempt %d)", d.Attempt)
	}
	if d.Crashed {
		b.WriteString(", crashed (redelivered after the lease)")
	} else {
		fmt.Fprintf(&b, ", %s", d.Decision.Action)
		if d.Decision.Action == delivery.Retry {
			fmt.Fprintf(&b, " after %v", d.Decision.Delay)
		}
		if d.Decision.Reason != "" {
			fmt.Fprintf(&b, " (%s)", d.Decision.Reason)
		}
	}
	if d.Err != nil {
		fmt.Fprintf(&b, ": %v", d.Err)
	} else if d.Problem != nil {
		fmt.Fprintf(&b, ": %v", d.Problem)
	}
	return b.String()
}

type copyState struct {
	deliveries   int
	acked        bool
	deadLettered bool
	gaveUp       bool
}

// MessageReport is what happened to one message and its copies.
type MessageReport[R any] struct {
	ID    string
	Index int
	// Deliveries lists every delivery of every copy, in the order they
	// answered.
	Deliveries []DeliveryReport[R]
	// Runs is how many times the handler ran: the deliveries that ran it,
	// counted once per key and claim attempt (deliveries waiting in the same
	// process share the outcome of the one that ran).
	Runs int
	// Acked and DeadLettered count the copies settled so.
	Acked, DeadLettered int
	// Effects is what the effect counter showed at the end; -1 when Run
	// was given none.
	Effects int
	// Steps and Compensations are what the step counter (Options.Steps)
	// showed at the end: the effects of each of the message's steps, and
	// the runs of each step's compensation, by step name. Nil when Run was
	// given no step counter, or none was recorded for the message.
	Steps, Compensations map[string]int
	// Stuck counts the deliveries still running when the run ended;
	// Abandoned those that did not return after their context was
	// cancelled.
	Stuck, Abandoned int

	copies   []copyState
	attempts map[keyAttempt]bool
}

type keyAttempt struct {
	key     string
	attempt int
}

// Statuses returns the status of each delivery, in order.
func (m *MessageReport[R]) Statuses() []delivery.Status {
	out := make([]delivery.Status, len(m.Deliveries))
	for i, d := range m.Deliveries {
		out[i] = d.Status
	}
	return out
}

// Decisions returns the decision of each delivery, in order (the zero
// Decision for a crashed one).
func (m *MessageReport[R]) Decisions() []delivery.Decision {
	out := make([]delivery.Decision, len(m.Deliveries))
	for i, d := range m.Deliveries {
		if !d.Crashed {
			out[i] = d.Decision
		}
	}
	return out
}

// Replayed returns the values duplicates were answered with, in order.
func (m *MessageReport[R]) Replayed() []R {
	var out []R
	for _, d := range m.Deliveries {
		if d.Status == delivery.StatusDuplicate {
			out = append(out, d.Value)
		}
	}
	return out
}

func (m *MessageReport[R]) record(copyNo, replica, replicas int, d adapter.Delivery[R], at time.Time, crashed bool) {
	dr := DeliveryReport[R]{
		Copy: copyNo, Replica: replica, replicated: replicas > 1, At: at, Key: d.Result.Key, Status: d.Result.Status, Attempt: d.Result.Attempt, Value: d.Result.Value,
		Err: d.Err, Problem: d.Result.Problem, Decision: d.Decision, Crashed: crashed,
	}
	m.Deliveries = append(m.Deliveries, dr)
	if !dr.Ran() {
		return
	}
	// Deliveries of one key waiting in one process share the outcome of
	// the one that ran, attempt number included: a run is counted once
	// per key and attempt (an unprotected, bypassed run has none).
	if dr.Attempt > 0 {
		ka := keyAttempt{dr.Key, dr.Attempt}
		if m.attempts == nil {
			m.attempts = map[keyAttempt]bool{}
		}
		if m.attempts[ka] {
			return
		}
		m.attempts[ka] = true
	}
	m.Runs++
}

// Report is what Run saw: per message, every delivery of every copy, and
// the problems found. Inspect it, print it (String), or hand it to Check.
type Report[R any] struct {
	Messages []MessageReport[R]
	// Problems are what went wrong, the causes first: every message's
	// stuck deliveries (a stuck delivery ends the run and leaves copies
	// unsettled behind it), then each message's problems in turn
	// (key-differs before the double-effect it causes), then the faults
	// not injected.
	Problems []Problem
	// Start and End are the fake clock's time when the run started and
	// ended.
	Start, End time.Time
	// Ended says why the run ended before every copy was settled; empty
	// when it did not.
	Ended string
	// Replicas is how many processes the messages were delivered to: 1
	// for a single target, Options.Replicas for a target made by Replicas
	// (0 in a Report of Effects.ExactlyOnce).
	Replicas int

	// effectsOnly: built by Effects.ExactlyOnce, from effects alone (no
	// deliveries to print).
	effectsOnly bool
	// stepsChecked: the steps' effects were checked (Options.Steps, or
	// step effects recorded before ExactlyOnce).
	stepsChecked bool
}

// ok reports whether no problem was found.
func (r *Report[R]) ok() bool { return len(r.Problems) == 0 }

// Err returns the problems as one error, or nil when no problem was
// found.
func (r *Report[R]) Err() error {
	if r.ok() {
		return nil
	}
	lines := make([]string, len(r.Problems))
	for i, p := range r.Problems {
		lines[i] = p.String()
	}
	return fmt.Errorf("deduptest: %d problem(s):\n%s", len(r.Problems), strings.Join(lines, "\n"))
}

// Message returns the report of the message with id, or nil.
func (r *Report[R]) Message(id string) *MessageReport[R] {
	for i := range r.Messages {
		if r.Messages[i].ID == id {
			return &r.Messages[i]
		}
	}
	return nil
}

// ProblemsOf returns the problems of kind k.
func (r *Report[R]) ProblemsOf(k ProblemKind) []Problem {
	var out []Problem
	for _, p := range r.Problems {
		if p.Kind == k {
			out = append(out, p)
		}
	}
	return out
}

// String describes the run: one line per message, then its deliveries
// and its problems.
func (r *Report[R]) String() string {
	var b strings.Builder
	messages := r.Messages
	if r.effectsOnly {
		// A line per message would be thousands of lines of one number
		// each: a summary, and the problems below.
		r.summarizeEffects(&b)
		messages = nil
	}
	for i := range messages {
		m := &messages[i]
		fmt.Fprintf(&b, "message %s: %d deliveries, %d handler runs, %d acked, %d dead-lettered", m.ID, len(m.Deliveries), m.Runs, m.Acked, m.DeadLettered)
		if m.Effects >= 0 {
			fmt.Fprintf(&b, ", effect x%d", m.Effects)
		}
		if len(m.Steps) > 0 {
			fmt.Fprintf(&b, ", steps %s", countsString(m.Steps))
		}
		if len(m.Compensations) > 0 {
			fmt.Fprintf(&b, ", compensated %s", countsString(m.Compensations))
		}
		b.WriteString("\n")
		for _, d := range m.Deliveries {
			fmt.Fprintf(&b, "  %s\n", d)
		}
	}
	if r.Ended != "" {
		fmt.Fprintf(&b, "run ended early: %s\n", r.Ended)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "PROBLEM %s\n", p)
	}
	if r.ok() {
		b.WriteString("ok\n")
	}
	return b.String()
}

// TB is the part of testing.TB that Check uses, so that any test
// framework can take a Report.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
}

// Check fails t with one error per problem, and the whole report once
// when there is any. It reports whether no problem was found.
func (r *Report[R]) Check(t TB) bool {
	t.Helper()
	if r.ok() {
		return true
	}
	for _, p := range r.Problems {
		t.Errorf("deduptest: %s", p)
	}
	t.Errorf("deduptest report:\n%s", r)
	return false
}

// countsString writes counts by name, sorted: "charge x1 reserve x2".
func countsString(counts map[string]int) string {
	names := make([]string, 0, len(counts))
	for name := range counts {
		names = append(names, name)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("%s x%d", name, counts[name])
	}
	return strings.Join(parts, " ")
}

// check finds the problems of every message. A report leads with the
// causes: the stuck deliveries first (a stuck delivery ends the run and
// leaves copies unsettled behind it), then each message's problems, keys
// that differ before the double effect they cause, and last the step
// problems of ids that are not among the messages (a step counter shared
// with another run).
func (r *Report[R]) check(effects func(string) int, steps *Effects) {
	var stuck, rest []Problem
	for i := range r.Messages {
		m := &r.Messages[i]
		add := func(to *[]Problem, k ProblemKind, format string, args ...any) {
			*to = append(*to, Problem{ID: m.ID, Kind: k, Detail: fmt.Sprintf(format, args...)})
		}
		if m.Abandoned > 0 {
			add(&stuck, Stuck, "%d deliveries did not return after their context was cancelled: does the handler honour ctx?", m.Abandoned)
		}
		if m.Stuck > 0 {
			add(&stuck, Stuck, "%d deliveries were still running when the run ended (%s)", m.Stuck, r.Ended)
		}
		unsettled := 0
		for _, c := range m.copies {
			switch {
			case c.acked:
				m.Acked++
			case c.deadLettered:
				m.DeadLettered++
			default:
				unsettled++
			}
		}
		if a, b, n := m.keys(); n > 1 {
			add(&rest, KeyDiffers, "copies of the message got different keys (%q for copy %d, %q for copy %d; %d keys in all), "+
				"each a new message to the receiver: take the key from what every copy carries alike "+
				"(the producer's id, a hash of the fields that do not change between sends), not from a delivery tag or a send time",
				a.Key, a.Copy, b.Key, b.Copy, n)
		}
		if effects != nil {
			m.Effects = effects(m.ID)
			switch {
			case m.Effects > 1:
				add(&rest, DoubleEffect, "the effect happened %d times (%d handler runs over %d deliveries)%s", m.Effects, m.Runs, len(m.Deliveries), m.hint())
			case m.Effects == 0 && m.Acked > 0:
				add(&rest, NoEffect, "%d copies were acknowledged but the effect never happened (statuses %v)", m.Acked, m.Statuses())
			}
		}
		if steps != nil {
			m.Steps, m.Compensations = steps.stepsOf(m.ID)
			rest = append(rest, steps.stepProblems(m.ID)...)
		}
		// The first result handed out by a delivery that ran the handler is
		// the one every duplicate must get.
		var first *DeliveryReport[R]
		for j := range m.Deliveries {
			d := &m.Deliveries[j]
			if d.Status == delivery.StatusProcessed && !d.Crashed {
				first = d
				break
			}
		}
		if first != nil {
			for _, d := range m.Deliveries {
				if d.Status == delivery.StatusDuplicate && d.Problem == nil && !reflect.DeepEqual(d.Value, first.Value) {
					add(&rest, WrongReplay, "copy %d was replayed %+v, but the first delivery that ran the handler (copy %d) answered %+v", d.Copy, d.Value, first.Copy, first.Value)
					break
				}
			}
		}
		if unsettled > 0 {
			why := "it ran out of MaxDeliveries"
			if r.Ended != "" {
				why = r.Ended
			}
			if m.Stuck > 0 || m.Abandoned > 0 {
				why += ", behind a stuck delivery of this message (see stuck)"
			}
			last := "never delivered"
			if n := len(m.Deliveries); n > 0 {
				last = "last delivery: " + m.Deliveries[n-1].String()
			}
			add(&rest, Unsettled, "%d of %d copies were neither acknowledged nor dead-lettered (%s; %s)", unsettled, len(m.copies), why, last)
		}
	}
	if steps != nil {
		r.stepsChecked = true
		for _, id := range steps.stepIDs() {
			if r.Message(id) == nil {
				rest = append(rest, steps.stepProblems(id)...)
			}
		}
	}
	r.Problems = append(append(r.Problems, stuck...), rest...)
}

// checkFaults reports every fault of fss that was not injected as asked.
func (r *Report[R]) checkFaults(fss []*FaultStore) {
	for _, fs := range fss {
		for _, d := range fs.unfired() {
			r.Problems = append(r.Problems, Problem{Kind: FaultNotInjected, Detail: d})
		}
	}
}

// keys returns the first delivery with a key, the first with another key
// than it, and how many keys the message's deliveries had.
func (m *MessageReport[R]) keys() (first, other DeliveryReport[R], n int) {
	seen := map[string]bool{}
	for _, d := range m.Deliveries {
		if d.Key == "" || seen[d.Key] {
			continue
		}
		seen[d.Key] = true
		switch len(seen) {
		case 1:
			first = d
		case 2:
			other = d
		}
	}
	return first, other, len(seen)
}

// hint names what a double effect came with, when the deliveries say.
func (m *MessageReport[R]) hint() string {
	var hints []string
	if _, _, n := m.keys(); n > 1 {
		hints = append(hints, "its copies got different keys (see key-differs)")
	}
	for _, d := range m.Deliveries {
		switch {
		case d.Crashed:
			hints = append(hints, "a worker crashed between the effect and the record: make the effect idempotent or record it in the store's transaction")
		case errors.Is(d.Problem, dedup.ErrLeaseLost) || errors.Is(d.Err, dedup.ErrLeaseLost):
			hints = append(hints, "a handler went on after its lease was lost: does it honour ctx?")
		case d.Ran() && d.Err != nil:
			hints = append(hints, "a handler failed after its effect: do the effect last, or make it idempotent")
		}
	}
	if len(hints) == 0 {
		return ""
	}
	return "; " + strings.Join(uniq(hints), "; ")
}

func uniq(s []string) []string {
	var out []string
	for _, x := range s {
		found := false
		for _, y := range out {
			found = found || x == y
		}
		if !found {
			out = append(out, x)
		}
	}
	return out
}
