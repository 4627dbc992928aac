// Command release tags every library module of the repository at one
// version. scripts/release.sh runs it:
//
//	scripts/release.sh VERSION [--dry-run] [--skip-tests] [--skip-api-check]
//
// It sets, in each library module's go.mod, every requirement on a module
// of this repository to VERSION (go mod edit -require; the replace
// directives to the local directories stay), commits those edits as
// "release VERSION: modules require VERSION", runs make test, and creates
// one annotated tag per library module: VERSION for the root module,
// DIR/VERSION for the module in DIR. It pushes nothing: it prints the git
// push command to run. It refuses if the work tree has changes or a tag
// exists, or if a module breaks the API of its base under a version that
// may not (the API check below). Library modules are all modules but those
// under examples, bench and tools.
//
// The API check compares each library module's packages (not internal, not
// main, not test files) with its latest release tag, or, while it has none,
// with the commit named in tools/apicheck/base (golang.org/x/exp/apidiff),
// prints the changes, and refuses an incompatible one unless VERSION is a
// new major version (or, before v1, a new minor one): see
// tools/internal/apicheck.BreakAllowed.
//
// Flags (before or after VERSION):
//
//	-C DIR        the repository (default: the git work tree holding the
//	              current directory)
//	--dry-run     print what would be edited, committed and tagged; change
//	              nothing (exits 1 if the release would be refused)
//	--skip-tests  do not run make test (release-check uses it in a
//	              throwaway clone)
//	--skip-api-check
//	              do not run the API check (release-check uses it: make
//	              test's api-check step checks the same tree)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/dedup-go/dedup/tools/internal/release"
	"github.com/dedup-go/dedup/tools/internal/repo"
)

func main() {
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	dir := fs.String("C", "", "the repository `dir` (default: the work tree holding the current directory)")
	dry := fs.Bool("dry-run", false, "print what would be edited, committed and tagged; change nothing")
	skip := fs.Bool("skip-tests", false, "do not run make test")
	skipAPI := fs.Bool("skip-api-check", false, "do not compare the modules' API with their base")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: scripts/release.sh VERSION [--dry-run] [--skip-tests] [--skip-api-check] [-C dir]")
		fs.PrintDefaults()
	}
	// Flags may come after VERSION: parse again after each positional
	// argument.
	var args []string
	rest := os.Args[1:]
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		args = append(args, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(args) != 1 {
		fs.Usage()
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := release.ValidateVersion(args[0]); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		return 2
	}
	root := *dir
	if root == "" {
		wd, err := os.Getwd()
		if err != nil {
			fmt.Fprintln(os.Stderr, "release:", err)
			return 1
		}
		if root, err = repo.Toplevel(ctx, wd); err != nil {
			fmt.Fprintln(os.Stderr, "release:", err)
			return 1
		}
	}
	err := release.Run(ctx, release.Options{
		Root: root, Version: args[0], DryRun: *dry, SkipTests: *skip, SkipAPICheck: *skipAPI, Out: os.Stdout,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		return 1
	}
	return 0
}
