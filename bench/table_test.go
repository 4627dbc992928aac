package bench

import (
	"context"
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

	"github.com/dedup-go/dedup/bench/internal/perf"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
)

// A row is one figure of the table: its sides measured in the same rounds,
// the first side being the baseline the others are compared with. Its aim
// is perf.Aims[name], in bench/internal/perf/aims.go.
type row struct {
	name string
	// unit of what each side's run returns: "ns/op", "msgs/s" or another.
	// A side's ratio is its value over the baseline's: for msgs/s 1.0 or
	// more is as fast or faster, for a cost it is "times the baseline".
	unit string
	// n is how many operations one run of a side does.
	n int
	// chunk, when set, splits each side's n operations of a round into
	// runs of chunk operations, the sides taking turns run by run, and
	// sums each side's runs: a side's round then spans the same stretch of
	// the machine's load as the others', not a stretch of its own (for
	// ns/op rows of a few microseconds a call, which the machine's idle
	// wake-ups and other work swing from one second to the next).
	chunk int
	// allocs shows allocations per operation (in-process rows).
	allocs bool
	// cpu adds under each side a line of the process's CPU time per
	// operation (user + sys, from getrusage): what stays stable on a
	// shared machine whose other load makes the wall-clock figures noisy.
	// A side's run may return it as sample.cpu, over the span of its own
	// choosing; otherwise it is measured around the whole run. A versus
	// line gets one too.
	cpu bool
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
	rounds := benchRounds()
	var filter *regexp.Regexp
	if v := os.Getenv("BENCH_ROWS"); v != "" {
		filter = regexp.MustCompile(v)
	}
	run := perf.Run{Go: runtime.Version(), Procs: runtime.GOMAXPROCS(0), Rounds: rounds, Filter: os.Getenv("BENCH_ROWS")}
	for _, r := range rows {
		if filter != nil && !filter.MatchString(r.name) {
			continue
		}
		b.Run(strings.ReplaceAll(r.name, " ", "_"), func(b *testing.B) {
			aim, ok := perf.Aims[r.name]
			if !ok {
				b.Errorf("row %q has no aim in bench/internal/perf/aims.go", r.name)
			}
			sides := r.setup(b)
			results, ceiling := measure(b, r, sides, rounds, aim.Ceiling)
			pr := perf.Row{Name: r.name, Unit: r.unit, N: r.n, Chunk: r.chunk, Allocs: r.allocs, CPU: r.cpu}
			for i, s := range sides {
				res := results[i]
				l := perf.Line{Kind: perf.Side, Name: s.name, Values: res.values, Ratios: res.ratios}
				if r.allocs {
					l.Allocs = res.allocs
				}
				b.Logf("%s: %s per round: %s", s.name, r.unit, formatAll(res.values))
				if r.cpu {
					l.CPU, l.CPURatios = res.cpus, res.cpuRatios
					b.Logf("%s: CPU µs per message per round: %s", s.name, formatAll(scaled(res.cpus, 1e-3)))
				}
				if slices.ContainsFunc(res.closings, func(d time.Duration) bool { return d > 0 }) {
					b.Logf("%s: closing after the last message (outside the clock), ms per round: %s", s.name, formatAll(millis(res.closings)))
				}
				pr.Lines = append(pr.Lines, l)
			}
			for _, v := range r.versus {
				l := perf.Line{Kind: perf.Versus, Name: v.name}
				for k := range rounds {
					l.Ratios = append(l.Ratios, results[v.a].values[k]/results[v.b].values[k])
					if r.cpu {
						l.CPURatios = append(l.CPURatios, results[v.a].cpus[k]/results[v.b].cpus[k])
					}
				}
				b.Logf("%s per round: %s", v.name, formatAll(l.Ratios))
				if r.cpu {
					b.Logf("%s, CPU per message, per round: %s", v.name, formatAll(l.CPURatios))
				}
				pr.Lines = append(pr.Lines, l)
			}
			if ceiling != nil {
				pr.Lines = append(pr.Lines, *ceiling)
				b.Logf("ceiling per round: %s (memstore Acquire + Complete, ns per message: %s)", formatAll(ceiling.Ratios), formatAll(ceiling.Values))
			}
			for _, g := range aim.Goals {
				if !slices.ContainsFunc(pr.Lines, func(l perf.Line) bool { return l.Kind != perf.Ceiling && g.Matches(l.Name) }) {
					b.Errorf("the aim's goal %q matches no line of the row", g.Side)
				}
			}
			run.Rows = append(run.Rows, pr)
		})
	}
	run.Date = time.Now().UTC().Format(time.RFC3339)
	table := perf.Render([]perf.Run{run})
	fmt.Println()
	fmt.Print(table)
	if path := os.Getenv("BENCH_OUT"); path != "" {
		out := []byte(table)
		if strings.HasSuffix(path, ".json") {
			var err error
			if out, err = run.Marshal(); err != nil {
				b.Fatal(err)
			}
		}
		if err := os.WriteFile(path, out, 0o644); err != nil {
			b.Errorf("write %s: %v", path, err)
		}
	}
}

// measure runs every side of r once per round, each round starting with
// the next side, so that no side always runs first or last; a row with a
// chunk takes turns chunk by chunk within the round, each turn starting
// with the next side. With ceiling, each round ends with memstore's own
// Acquire + Complete of n keys, and the ceiling line has the ceiling its
// time implies for the round's baseline.
func measure(tb testing.TB, r row, sides []side, rounds int, ceiling bool) ([]result, *perf.Line) {
	results := make([]result, len(sides))
	// A warm-up run per side: connections, caches and JIT-like effects of
	// the first round are not measured.
	for _, s := range sides {
		s.run(tb, max(r.n/10, 1))
	}
	var ceil *perf.Line
	if ceiling {
		ceil = &perf.Line{Kind: perf.Ceiling, Name: "ceiling: bare / (bare + memstore Acquire + Complete), per message"}
		memstoreAcquireComplete(tb, max(r.n/10, 1))
	}
	chunk := r.n
	if r.chunk > 0 && r.chunk < r.n {
		chunk = r.chunk
	}
	for round := range rounds {
		// Per side: the round's total time (ns or seconds, by unit), CPU
		// (ns) and allocations, over its chunks.
		spent := make([]float64, len(sides))
		cpus := make([]float64, len(sides))
		allocs := make([]float64, len(sides))
		turn := 0
		for done := 0; done < r.n; done += chunk {
			m := min(chunk, r.n-done)
			for k := range sides {
				i := (round + turn + k) % len(sides)
				if m == r.n {
					runtime.GC()
				}
				before := processCPU()
				s := sides[i].run(tb, m)
				if r.cpu && s.cpu == 0 {
					s.cpu = float64((processCPU() - before).Nanoseconds()) / float64(m)
				}
				spent[i] += perOp(r.unit, s.value) * float64(m)
				cpus[i] += s.cpu * float64(m)
				allocs[i] += s.allocs * float64(m)
				results[i].closings = append(results[i].closings, s.closing)
			}
			turn++
		}
		values := make([]float64, len(sides))
		for i := range sides {
			values[i] = perOp(r.unit, spent[i]/float64(r.n))
			cpus[i] /= float64(r.n)
			results[i].allocs = append(results[i].allocs, allocs[i]/float64(r.n))
		}
		for i := range sides {
			results[i].values = append(results[i].values, values[i])
			results[i].ratios = append(results[i].ratios, values[i]/values[0])
			results[i].cpus = append(results[i].cpus, cpus[i])
			results[i].cpuRatios = append(results[i].cpuRatios, cpus[i]/cpus[0])
		}
		if ceil != nil {
			storeNs := memstoreAcquireComplete(tb, r.n)
			bareNs := values[0] // ns/op
			if r.unit == "msgs/s" {
				bareNs = 1e9 / values[0]
			}
			ceil.Values = append(ceil.Values, storeNs)
			ceil.Ratios = append(ceil.Ratios, bareNs/(bareNs+storeNs))
		}
	}
	return results, ceil
}

// perOp turns a msgs/s value into seconds per message and back (it is its
// own inverse); a value of another unit is already per operation.
func perOp(unit string, v float64) float64 {
	if unit == "msgs/s" {
		return 1 / v
	}
	return v
}

// memstoreAcquireComplete is memstore's own work for n new messages, in ns
// per message: the store calls Handle makes for each, without the
// receiver.
func memstoreAcquireComplete(tb testing.TB, n int) float64 {
	ctx := context.Background()
	st, err := memstore.New(nil)
	if err != nil {
		tb.Fatal(err)
	}
	keys := ids("ceiling:o-", n)
	return timed(n, func(i int) {
		c, err := st.Acquire(ctx, store.AcquireRequest{Key: keys[i], Lease: 30 * time.Second})
		if err != nil {
			tb.Fatal(err)
		}
		if err := st.Complete(ctx, store.CompleteRequest{Key: keys[i], Token: c.Token, Retention: 24 * time.Hour}); err != nil {
			tb.Fatal(err)
		}
	}).value
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
		out[i] = perf.Format(x)
	}
	return strings.Join(out, ", ")
}

// benchRounds is how many rounds each row (and each operation of the SQL
// scale harness) runs: BENCH_ROUNDS, 7 when it is unset or not a positive
// number.
func benchRounds() int {
	if v, err := strconv.Atoi(os.Getenv("BENCH_ROUNDS")); err == nil && v > 0 {
		return v
	}
	return 7
}
