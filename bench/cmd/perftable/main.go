// Command perftable merges run files of BenchmarkTable into one markdown
// table, with the aims of bench/internal/perf/aims.go and whether the runs
// met them.
//
// Usage:
//
//	go -C bench run ./cmd/perftable [-doc FILE [-check]] RUN.json...
//
// A run file is what BenchmarkTable writes when BENCH_OUT names a .json
// file. Without -doc the table goes to standard output. With -doc, the
// lines of FILE between the markers
//
//	<!-- perf-table:begin ... -->
//	<!-- perf-table:end -->
//
// are replaced by it; with -check as well, FILE is left alone and the
// command exits 1 if those lines differ from it (a run file, an aim or
// the block edited without the other). scripts/perf-table.sh runs it on
// docs/performance.md and bench/results/*.json.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/dedup-go/dedup/bench/internal/perf"
)

func main() {
	doc := flag.String("doc", "", "markdown `file` whose generated block to rewrite (or check)")
	check := flag.Bool("check", false, "with -doc: exit 1 if the file's block differs, writing nothing")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: perftable [-doc FILE [-check]] RUN.json...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 || (*check && *doc == "") {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(run(*doc, *check, flag.Args()))
}

func run(doc string, check bool, paths []string) int {
	for name, aim := range perf.Aims {
		if err := aim.Validate(); err != nil {
			fmt.Fprintf(os.Stderr, "perftable: aim of %q: %v\n", name, err)
			return 1
		}
	}
	runs, err := perf.ReadRuns(paths...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "perftable:", err)
		return 1
	}
	table := perf.Render(runs)
	if doc == "" {
		fmt.Print(table)
		return 0
	}
	old, err := os.ReadFile(doc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "perftable:", err)
		return 1
	}
	updated, err := perf.Splice(string(old), "\n"+table+"\n")
	if err != nil {
		fmt.Fprintf(os.Stderr, "perftable: %s: %v\n", doc, err)
		return 1
	}
	if !check {
		if updated == string(old) {
			return 0
		}
		if err := os.WriteFile(doc, []byte(updated), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "perftable:", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "perftable: %s rewritten from %d run file(s)\n", doc, len(runs))
		return 0
	}
	if updated != string(old) {
		line, was, want := firstDifference(string(old), updated)
		fmt.Fprintf(os.Stderr, "perftable: %s:%d: the generated block differs from what %s and the aims give\n  doc:  %s\n  runs: %s\n"+
			"run scripts/perf-table.sh to rewrite it (and edit bench/internal/perf/aims.go, not the doc, to change an aim)\n",
			doc, line, strings.Join(paths, " "), was, want)
		return 1
	}
	fmt.Printf("perftable: %s matches %d run file(s) and the aims\n", doc, len(runs))
	return 0
}

// firstDifference is the first line (1-based) where a and b differ, and
// that line of each.
func firstDifference(a, b string) (int, string, string) {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range max(len(la), len(lb)) {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			return i + 1, x, y
		}
	}
	return 0, "", ""
}
