package bench

import (
	"cmp"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A row is one figure of the table: its sides measured in the same rounds,
// the first side being the baseline the others are compared with.
type row struct {
	name string
	// unit of what each side's run returns: "ns/op", "msgs/s" or another.
	// A side's ratio is its value over the baseline's: for msgs/s 1.0 or
	// more is as fast or faster, for a cost it is "times the baseline".
	unit string
	// n is how many operations one run of a side does.
	n int
	// allocs shows allocations per operation (in-process rows).
	allocs bool
	// cpu adds under each side a line of the process's CPU time per
	// operation (user + sys, from getrusage), which the side's run returns
	// as sample.cpu: what stays stable on a shared machine whose other load
	// makes the wall-clock figures noisy. A versus line gets one too.
	cpu bool
	// aim is what the row should show, from the speed issue.
	aim string
	// setup makes the sides; its cleanups run when the row is done.
	setup func(tb testing.TB) []side
	// versus adds lines comparing two sides of the row with each other
	// rather than with the baseline, after the sides' lines.
	versus []versus
}

// versus is a line of a row comparing side a with side b (indexes of the
// row's sides): the median of the per-round ratios of a's value to b's.
type versus struct {
	name string
	a, b int
}

// A side of a row.
type side struct {
	name string
	// run does n operations and returns the row's unit for them.
	run func(tb testing.TB, n int) sample
}

// sample is one run of a side: its value in the row's unit, and the
// allocations per operation of the measured part (not of its setup).
type sample struct {
	value  float64
	allocs float64
	// cpu is the process's CPU time (user + sys) per operation, in
	// nanoseconds, over the same span as value; rows with cpu set only.
	cpu float64
	// closing is how long the side took, after its last message was
	// handled, to stop its consumer and close its connections: outside
	// value's clock, logged per round (broker rows only).
	closing time.Duration
}

// rows are registered by the files of this package, one per subject.
var rows []row

func register(r ...row) { rows = append(rows, r...) }

type result struct {
	values    []float64 // one per round
	ratios    []float64 // one per round: value over the baseline's of that round
	allocs    []float64
	cpus      []float64 // one per round, ns per operation (rows with cpu set)
	cpuRatios []float64 // one per round: cpu over the baseline's of that round
	closings  []time.Duration
}

// BenchmarkTable runs every selected row in interleaved rounds and prints
// the table. See the package documentation for the command.
func BenchmarkTable(b *testing.B) {
	if b.N != 1 {
		b.Skip("run with -benchtime 1x: each row times its own rounds")
	}
	rounds := 7
	if v, err := strconv.Atoi(os.Getenv("BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	var filter *regexp.Regexp
	if v := os.Getenv("BENCH_ROWS"); v != "" {
		filter = regexp.MustCompile(v)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "%d rounds per row, sides interleaved; median, min-max over rounds; ratio is the median of per-round ratios to the row's baseline (first line), or, on a line \"A over B\", of A's to B's.\n\n", rounds)
	out.WriteString("| figure | side | median | min-max | ratio | allocs/op | aim |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		if filter != nil && !filter.MatchString(r.name) {
			continue
		}
		b.Run(strings.ReplaceAll(r.name, " ", "_"), func(b *testing.B) {
			sides := r.setup(b)
			results := measure(b, r, sides, rounds)
			for i, s := range sides {
				res := results[i]
				fig, aim := "", ""
				if i == 0 {
					fig, aim = r.name, r.aim
				}
				ratio := "baseline"
				if i > 0 {
					ratio = fmt.Sprintf("%.2f", median(res.ratios))
				}
				allocs := ""
				if r.allocs {
					allocs = fmt.Sprintf("%.1f", median(res.allocs))
				}
				fmt.Fprintf(&out, "| %s | %s | %s %s | %s-%s | %s | %s | %s |\n", fig, s.name,
					format(median(res.values)), r.unit, format(slices.Min(res.values)), format(slices.Max(res.values)),
					ratio, allocs, aim)
				b.Logf("%s: %s per round: %s", s.name, r.unit, formatAll(res.values))
				if r.cpu {
					cpuRatio := "baseline"
					if i > 0 {
						cpuRatio = fmt.Sprintf("%.2f", median(res.cpuRatios))
					}
					us := func(ns float64) string { return format(ns / 1e3) }
					fmt.Fprintf(&out, "|  | ↳ CPU per message (process, user + sys) | %s µs | %s-%s | %s |  |  |\n",
						us(median(res.cpus)), us(slices.Min(res.cpus)), us(slices.Max(res.cpus)), cpuRatio)
					b.Logf("%s: CPU µs per message per round: %s", s.name, formatAll(scaled(res.cpus, 1e-3)))
				}
				if slices.ContainsFunc(res.closings, func(d time.Duration) bool { return d > 0 }) {
					b.Logf("%s: closing after the last message (outside the clock), ms per round: %s", s.name, formatAll(millis(res.closings)))
				}
			}
			for _, v := range r.versus {
				ratios := make([]float64, rounds)
				cpuRatios := make([]float64, rounds)
				for k := range ratios {
					ratios[k] = results[v.a].values[k] / results[v.b].values[k]
					if r.cpu {
						cpuRatios[k] = results[v.a].cpus[k] / results[v.b].cpus[k]
					}
				}
				fmt.Fprintf(&out, "|  | %s |  |  | %.2f |  |  |\n", v.name, median(ratios))
				b.Logf("%s per round: %s", v.name, formatAll(ratios))
				if r.cpu {
					fmt.Fprintf(&out, "|  | ↳ CPU per message, %s |  |  | %.2f |  |  |\n", v.name, median(cpuRatios))
					b.Logf("%s, CPU per message, per round: %s", v.name, formatAll(cpuRatios))
				}
			}
		})
	}
	fmt.Println()
	fmt.Print(out.String())
	if path := os.Getenv("BENCH_OUT"); path != "" {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			b.Errorf("write %s: %v", path, err)
		}
	}
}

// measure runs every side of r once per round, each round starting with
// the next side, so that no side always runs first or last.
func measure(tb testing.TB, r row, sides []side, rounds int) []result {
	results := make([]result, len(sides))
	// A warm-up run per side: connections, caches and JIT-like effects of
	// the first round are not measured.
	for _, s := range sides {
		s.run(tb, max(r.n/10, 1))
	}
	for round := range rounds {
		values := make([]float64, len(sides))
		cpus := make([]float64, len(sides))
		for k := range sides {
			i := (round + k) % len(sides)
			runtime.GC()
			s := sides[i].run(tb, r.n)
			values[i] = s.value
			cpus[i] = s.cpu
			results[i].allocs = append(results[i].allocs, s.allocs)
			results[i].closings = append(results[i].closings, s.closing)
		}
		for i := range sides {
			results[i].values = append(results[i].values, values[i])
			results[i].ratios = append(results[i].ratios, values[i]/values[0])
			results[i].cpus = append(results[i].cpus, cpus[i])
			results[i].cpuRatios = append(results[i].cpuRatios, cpus[i]/cpus[0])
		}
	}
	return results
}

// timed runs op n times and returns nanoseconds per operation.
func timed(n int, op func(i int)) sample {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	for i := range n {
		op(i)
	}
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	return sample{
		value:  float64(elapsed.Nanoseconds()) / float64(n),
		allocs: float64(after.Mallocs-before.Mallocs) / float64(n),
	}
}

// rate runs work (n messages) and returns messages per second.
func rate(n int, work func()) sample {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	work()
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	return sample{
		value:  float64(n) / elapsed.Seconds(),
		allocs: float64(after.Mallocs-before.Mallocs) / float64(n),
	}
}

// processCPU is the user and system CPU time the whole process has used,
// all its threads (an in-process broker's included).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// scaled returns v with every value multiplied by f.
func scaled(v []float64, f float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = x * f
	}
	return out
}

// millis returns d in milliseconds.
func millis(d []time.Duration) []float64 {
	out := make([]float64, len(d))
	for i, x := range d {
		out[i] = float64(x.Microseconds()) / 1e3
	}
	return out
}

// formatAll formats every value of v, in order.
func formatAll(v []float64) string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = format(x)
	}
	return strings.Join(out, ", ")
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.SortFunc(s, cmp.Compare)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// format prints a value with three significant digits, thousands grouped.
func format(v float64) string {
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
