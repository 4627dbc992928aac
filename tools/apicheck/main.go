// Command apicheck compares the API of every library module of the
// repository, as the work tree has it, with the module's base: its latest
// release tag, or, while it has none, the commit named in
// tools/apicheck/base. It prints each module's incompatible and compatible
// changes (golang.org/x/exp/apidiff over the module's library packages:
// not internal, not main, not test files):
//
//	go -C tools run ./apicheck [-version VERSION] ..
//
// Without -version it exits 1 on any incompatible change (make api-check,
// a step of make test: the work tree must keep its base's API). With
// -version it exits 1 only on an incompatible change that VERSION may not
// carry: one under a minor or patch version of the base's major (a v0
// minor may break), as scripts/release.sh refuses it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/dedup-go/dedup/tools/internal/apicheck"
)

func main() {
	version := flag.String("version", "", "judge the incompatible changes for a release at `VERSION` (default: refuse any)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: go -C tools run ./apicheck [-version VERSION] [REPO_ROOT]")
		flag.PrintDefaults()
	}
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	if flag.NArg() > 1 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	results, err := apicheck.Check(ctx, apicheck.Options{Root: root, Out: os.Stdout})
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(2)
	}
	var refused []string
	if *version != "" {
		refused = apicheck.Refusals(results, *version)
	} else {
		for _, r := range results {
			if len(r.Incompatible) > 0 {
				refused = append(refused, fmt.Sprintf("%s: %d incompatible changes with its base %s", r.Module.Path, len(r.Incompatible), r.Base))
			}
		}
	}
	fmt.Printf("apicheck: %d modules in %.1fs\n", len(results), time.Since(start).Seconds())
	if len(refused) > 0 {
		fmt.Fprintf(os.Stderr, "apicheck: refused:\n  %s\n", strings.Join(refused, "\n  "))
		os.Exit(1)
	}
}
