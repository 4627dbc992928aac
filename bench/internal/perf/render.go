package perf

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Render is the markdown of runs merged: every row of any run, in the
// order the runs met them, each figure the median of the runs' own (a
// run's ratio being the median of its per-round ratios), each run's ratio
// in brackets when there are several, the spread of every round of every
// run, and each row's aim from Aims with whether the runs met it. A table
// of the aims' goals follows.
func Render(runs []Run) string {
	var b strings.Builder
	writeIntro(&b, runs)
	b.WriteString("| figure | side | median | ratio | per round: IQR; min-max | allocs/op | aim |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	var goals []goalResult
	for _, m := range merge(runs) {
		goals = append(goals, writeRow(&b, m)...)
	}
	if len(goals) > 0 {
		b.WriteString("\nThe aims' goals (from `bench/internal/perf/aims.go`), each against the merged ratio or median of its line:\n\n")
		b.WriteString("| figure | line | aim | ceiling | now | |\n|---|---|---|---|---|---|\n")
		last := ""
		for _, g := range goals {
			fig := ""
			if g.row != last {
				fig, last = g.row, g.row
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", fig, g.line, g.goal.String(), g.ceiling, g.now, g.status)
		}
	}
	return b.String()
}

func writeIntro(b *strings.Builder, runs []Run) {
	var each []string
	for _, r := range runs {
		s := fmt.Sprintf("%s (%d rounds, Go %s, GOMAXPROCS %d", r.Date, r.Rounds, strings.TrimPrefix(r.Go, "go"), r.Procs)
		if r.Filter != "" {
			s += fmt.Sprintf(", rows `%s`", r.Filter)
		}
		each = append(each, s+")")
	}
	if len(runs) == 1 {
		fmt.Fprintf(b, "One run: %s. ", each[0])
	} else {
		fmt.Fprintf(b, "%d runs: %s. ", len(runs), strings.Join(each, "; "))
	}
	b.WriteString("Each row's sides ran in interleaved rounds (a row with a chunk alternated its sides every chunk of operations within a round). " +
		"A row's first line is its baseline; a ratio is the median of a run's per-round ratios to that baseline, " +
		"or on a line \"A over B\" of A's to B's (for msgs/s above 1 is faster, for a cost below 1 is cheaper). ")
	if len(runs) > 1 {
		b.WriteString("With several runs, median is the median of the runs' medians and ratio the median of the runs' ratios, each run's in brackets. ")
	}
	b.WriteString("The spread is over every round of every run: of the value on a baseline line, of the ratio on the others. " +
		"A ceiling line is what memstore's own Acquire + Complete, measured in the same rounds (its median in ns per message), " +
		"leaves of the bare side's rate: bare time per message / (bare + memstore's).\n\n")
}

// merged is one row over the runs that ran it.
type merged struct {
	name, unit string
	allocs     bool
	chunk      int
	lines      []mergedLine
}

type mergedLine struct {
	kind Kind
	name string
	runs []Line // one per run that has the line
}

func merge(runs []Run) []merged {
	var out []merged
	for _, run := range runs {
		for _, r := range run.Rows {
			i := slices.IndexFunc(out, func(m merged) bool { return m.name == r.Name })
			if i < 0 {
				out = append(out, merged{name: r.Name, unit: r.Unit, allocs: r.Allocs, chunk: r.Chunk})
				i = len(out) - 1
			}
			m := &out[i]
			for _, l := range r.Lines {
				j := slices.IndexFunc(m.lines, func(ml mergedLine) bool { return ml.kind == l.Kind && ml.name == l.Name })
				if j < 0 {
					m.lines = append(m.lines, mergedLine{kind: l.Kind, name: l.Name})
					j = len(m.lines) - 1
				}
				m.lines[j].runs = append(m.lines[j].runs, l)
			}
		}
	}
	return out
}

// of is the median over runs of each run's median of pick.
func (l mergedLine) of(pick func(Line) []float64) (float64, []float64) {
	var each []float64
	for _, r := range l.runs {
		if v := pick(r); len(v) > 0 {
			each = append(each, Median(v))
		}
	}
	return Median(each), each
}

// pooled is every round of every run of pick.
func (l mergedLine) pooled(pick func(Line) []float64) []float64 {
	var all []float64
	for _, r := range l.runs {
		all = append(all, pick(r)...)
	}
	return all
}

func values(l Line) []float64    { return l.Values }
func ratios(l Line) []float64    { return l.Ratios }
func allocs(l Line) []float64    { return l.Allocs }
func cpus(l Line) []float64      { return l.CPU }
func cpuRatios(l Line) []float64 { return l.CPURatios }

// ratioCell is the merged ratio, with each run's in brackets when there
// are several.
func ratioCell(med float64, each []float64) string {
	s := fmt.Sprintf("%.2f", med)
	if len(each) > 1 {
		parts := make([]string, len(each))
		for i, v := range each {
			parts[i] = fmt.Sprintf("%.2f", v)
		}
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return s
}

// spreadCell is the interquartile range and the range of v.
func spreadCell(v []float64, f func(float64) string) string {
	if len(v) == 0 {
		return ""
	}
	q1, q3 := Quartiles(v)
	return fmt.Sprintf("%s-%s; %s-%s", f(q1), f(q3), f(slices.Min(v)), f(slices.Max(v)))
}

func twoDigits(v float64) string { return fmt.Sprintf("%.2f", v) }

type goalResult struct {
	row, line, ceiling, now, status string
	goal                            Goal
}

func writeRow(b *strings.Builder, m merged) []goalResult {
	aim, known := Aims[m.name]
	aimText := aim.String()
	if !known {
		aimText = "**no aim in bench/internal/perf/aims.go**"
	}
	ceiling := ""
	for _, l := range m.lines {
		if l.kind == Ceiling {
			med, _ := l.of(ratios)
			ceiling = fmt.Sprintf("%.2f", med)
			aimText += fmt.Sprintf(" (ceiling %s)", ceiling)
		}
	}
	if m.chunk > 0 {
		aimText += fmt.Sprintf("; sides alternated every %d operations", m.chunk)
	}
	var results []goalResult
	status := func(l mergedLine) string {
		var out []string
		for _, g := range aim.Goals {
			if l.kind == Ceiling || !g.Matches(l.name) {
				continue
			}
			r := evaluate(g, m, l)
			r.ceiling = ceiling
			results = append(results, r)
			out = append(out, r.status)
		}
		return strings.Join(out, ", ")
	}
	first := true
	baseline := true
	for _, l := range m.lines {
		fig, aimCell := "", status(l)
		if first {
			fig = m.name
			if aimCell != "" {
				aimCell = aimText + "; this line: " + aimCell
			} else {
				aimCell = aimText
			}
			first = false
		}
		switch l.kind {
		case Side:
			med, _ := l.of(values)
			ratio, spread := "baseline", spreadCell(l.pooled(values), Format)
			if !baseline {
				ratio = ratioCell(l.of(ratios))
				spread = spreadCell(l.pooled(ratios), twoDigits)
			}
			allocCell := ""
			if m.allocs {
				a, _ := l.of(allocs)
				allocCell = fmt.Sprintf("%.1f", a)
			}
			fmt.Fprintf(b, "| %s | %s | %s %s | %s | %s | %s | %s |\n", fig, l.name, Format(med), m.unit, ratio, spread, allocCell, aimCell)
			if c := l.pooled(cpus); len(c) > 0 {
				cmed, _ := l.of(cpus)
				cratio, cspread := "baseline", spreadCell(scaled(c, 1e-3), Format)
				if !baseline {
					cratio = ratioCell(l.of(cpuRatios))
					cspread = spreadCell(l.pooled(cpuRatios), twoDigits)
				}
				fmt.Fprintf(b, "|  | ↳ CPU per message (process, user + sys) | %s µs | %s | %s |  |  |\n", Format(cmed/1e3), cratio, cspread)
			}
			baseline = false
		case Versus:
			fmt.Fprintf(b, "| %s | %s |  | %s | %s |  | %s |\n", fig, l.name, ratioCell(l.of(ratios)), spreadCell(l.pooled(ratios), twoDigits), aimCell)
			if c := l.pooled(cpuRatios); len(c) > 0 {
				fmt.Fprintf(b, "|  | ↳ CPU per message, %s |  | %s | %s |  |  |\n", l.name, ratioCell(l.of(cpuRatios)), spreadCell(c, twoDigits))
			}
		case Ceiling:
			ns, _ := l.of(values)
			fmt.Fprintf(b, "| %s | %s | %s ns/msg | %s | %s |  | %s |\n", fig, l.name, Format(ns), ratioCell(l.of(ratios)), spreadCell(l.pooled(ratios), twoDigits), aimCell)
		}
	}
	for _, g := range aim.Goals {
		if !slices.ContainsFunc(m.lines, func(l mergedLine) bool { return l.kind != Ceiling && g.Matches(l.name) }) {
			results = append(results, goalResult{row: m.name, line: "(none)", goal: g, ceiling: ceiling, status: "**no line matches**"})
		}
	}
	return results
}

// evaluate checks goal g against line l of row m.
func evaluate(g Goal, m merged, l mergedLine) goalResult {
	r := goalResult{row: m.name, line: l.name, goal: g}
	var v float64
	var each []float64
	switch g.Of {
	case Ratio:
		v, each = l.of(ratios)
		r.now = ratioCell(v, each)
	case Value:
		if g.Unit != m.unit {
			r.status = fmt.Sprintf("**the row's unit is %s, not %s**", m.unit, g.Unit)
			return r
		}
		v, each = l.of(values)
		r.now = Format(v) + " " + m.unit
	case Allocs:
		v, each = l.of(allocs)
		r.now = fmt.Sprintf("%.1f allocs/op", v)
	}
	if len(each) == 0 {
		r.status = "**not measured**"
		return r
	}
	r.status = "**missed**"
	if g.Met(v) {
		r.status = "met"
	}
	return r
}

func scaled(v []float64, f float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = x * f
	}
	return out
}

// Median of v; 0 for none.
func Median(v []float64) float64 {
	return quantile(v, 0.5)
}

// Quartiles are the first and third quartiles of v (linear between the
// closest ranks).
func Quartiles(v []float64) (q1, q3 float64) {
	return quantile(v, 0.25), quantile(v, 0.75)
}

func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.SortFunc(s, cmp.Compare)
	pos := q * float64(len(s)-1)
	lo := int(pos)
	if lo+1 >= len(s) {
		return s[lo]
	}
	return s[lo] + (pos-float64(lo))*(s[lo+1]-s[lo])
}

// Format prints a value with three significant digits, thousands grouped.
func Format(v float64) string {
	switch {
	case v >= 1000:
		s := strconv.FormatFloat(v, 'f', 0, 64)
		var b strings.Builder
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(c)
		}
		return b.String()
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}
