// Package release tags the library modules of the repository at one
// version: it makes every library module require that version of the
// repository's modules it uses, commits that, runs the tests and creates
// one annotated tag per library module. It pushes nothing.
package release

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/mod/semver"

	"github.com/dedup-go/dedup/tools/internal/apicheck"
	"github.com/dedup-go/dedup/tools/internal/repo"
)

// ErrRefused is returned (wrapped) when the release cannot be made as the
// repository stands: the work tree has changes, a tag exists, or a
// module's go.mod is not as a release needs it.
var ErrRefused = errors.New("release refused")

// Options configures Run.
type Options struct {
	// Root is the root of the repository's git work tree.
	Root string
	// Version is the version to release, such as v0.1.0.
	Version string
	// DryRun prints what Run would edit, commit and tag, and changes
	// nothing.
	DryRun bool
	// SkipTests skips the test suite.
	SkipTests bool
	// SkipAPICheck skips the API check (apicheck.Check), which otherwise
	// refuses a module's incompatible change with its base under a
	// version that may not break it (apicheck.BreakAllowed).
	SkipAPICheck bool
	// Test runs the test suite; nil runs `make test` in Root.
	Test func(ctx context.Context, out io.Writer) error
	// Go is the go command; "" means "go".
	Go string
	// Out receives the progress and the plan.
	Out io.Writer
}

// ValidateVersion reports whether v is a version this repository can be
// released at: a canonical semantic version vMAJOR.MINOR.PATCH (with an
// optional pre-release), major 0 or 1 since the module paths have no /vN
// suffix.
func ValidateVersion(v string) error {
	if !semver.IsValid(v) {
		return fmt.Errorf("version %q is not a semantic version: want vMAJOR.MINOR.PATCH, such as v0.1.0", v)
	}
	if semver.Build(v) != "" {
		return fmt.Errorf("version %q has build metadata (%s), which the go command does not accept", v, semver.Build(v))
	}
	if c := semver.Canonical(v); c != v {
		return fmt.Errorf("version %q is not canonical: want %s", v, c)
	}
	if m := semver.Major(v); m != "v0" && m != "v1" {
		return fmt.Errorf("version %q: major version %s needs module paths ending in /%s, which this repository's modules do not have", v, m, m)
	}
	return nil
}

// edit is one requirement Run sets to the version.
type edit struct {
	mod      repo.Module
	req, old string
}

// Run makes the release described by opts. With DryRun it only prints the
// plan, and returns an error wrapping ErrRefused if the release would be
// refused.
func Run(ctx context.Context, opts Options) error {
	out := opts.Out
	if out == nil {
		out = io.Discard
	}
	goCmd := opts.Go
	if goCmd == "" {
		goCmd = "go"
	}
	v := opts.Version
	if err := ValidateVersion(v); err != nil {
		return err
	}
	root, err := filepath.Abs(opts.Root)
	if err != nil {
		return err
	}
	mods, err := repo.Modules(root)
	if err != nil {
		return err
	}
	libs := repo.Libraries(mods)

	var problems []string
	var edits []edit
	for _, m := range libs {
		f, err := repo.ParseMod(root, m)
		if err != nil {
			return err
		}
		for _, r := range f.Require {
			if !repo.Own(mods, r.Mod.Path) {
				continue
			}
			if !repo.Own(libs, r.Mod.Path) {
				problems = append(problems, fmt.Sprintf("%s requires %s, a module that is never released", m.ModFile(), r.Mod.Path))
				continue
			}
			local := false
			for _, rep := range f.Replace {
				if rep.Old.Path == r.Mod.Path && rep.Old.Version == "" && rep.New.Version == "" {
					local = true
				}
			}
			if !local {
				problems = append(problems, fmt.Sprintf("%s requires %s with no replace to its directory: its tests would need the unreleased %s", m.ModFile(), r.Mod.Path, v))
			}
			if r.Mod.Version != v {
				edits = append(edits, edit{mod: m, req: r.Mod.Path, old: r.Mod.Version})
			}
		}
	}
	status, err := repo.Git(ctx, root, "status", "--porcelain", "--untracked-files=normal")
	if err != nil {
		return err
	}
	if status != "" {
		problems = append(problems, "the work tree has changes; commit or stash them first:\n"+indent(status, "    "))
	}
	for _, m := range libs {
		exists, err := repo.TagExists(ctx, root, m.Tag(v))
		if err != nil {
			return err
		}
		if exists {
			problems = append(problems, fmt.Sprintf("tag %s exists", m.Tag(v)))
		}
	}

	fmt.Fprintf(out, "release %s of %d library modules in %s\n", v, len(libs), root)
	if len(edits) == 0 {
		fmt.Fprintf(out, "go.mod: every requirement on this repository's modules is %s already\n", v)
	}
	for _, e := range edits {
		fmt.Fprintf(out, "edit %s: require %s %s -> %s\n", e.mod.ModFile(), e.req, e.old, v)
	}
	if len(edits) > 0 {
		fmt.Fprintf(out, "commit %q\n", commitMessage(v))
	}
	if !opts.SkipTests {
		fmt.Fprintln(out, "test: make test")
	}
	for _, m := range libs {
		if m.Command {
			fmt.Fprintf(out, "tag %s (%s %s, a command: on a commit of its own whose go.mod has no replace directives, for go install)\n", m.Tag(v), m.Path, v)
			continue
		}
		fmt.Fprintf(out, "tag %s (%s %s)\n", m.Tag(v), m.Path, v)
	}
	if !opts.SkipAPICheck {
		fmt.Fprintf(out, "api check: each library module against its latest tag, or %s while it has none\n", apicheck.BaseFile)
		results, err := apicheck.Check(ctx, apicheck.Options{Root: root, Out: out})
		if err != nil {
			return err
		}
		problems = append(problems, apicheck.Refusals(results, v)...)
	}
	if len(problems) > 0 {
		verb := "refusing"
		if opts.DryRun {
			verb = "a release would be refused"
		}
		return fmt.Errorf("%w: %s:\n  %s", ErrRefused, verb, strings.Join(problems, "\n  "))
	}
	if opts.DryRun {
		fmt.Fprintln(out, "dry run: nothing edited, committed or tagged")
		return nil
	}

	var files []string
	for _, e := range edits {
		cmd := exec.CommandContext(ctx, goCmd, "mod", "edit", "-require="+e.req+"@"+v)
		cmd.Dir = filepath.Join(root, filepath.FromSlash(e.mod.Dir))
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go mod edit in %s: %w: %s", e.mod.Dir, err, b)
		}
		if len(files) == 0 || files[len(files)-1] != e.mod.ModFile() {
			files = append(files, e.mod.ModFile())
		}
	}
	if len(files) > 0 {
		if _, err := repo.Git(ctx, root, append([]string{"add", "--"}, files...)...); err != nil {
			return err
		}
		args := append([]string{"commit", "-q", "-m", commitMessage(v), "--"}, files...)
		if _, err := repo.Git(ctx, root, args...); err != nil {
			return err
		}
		sha, _ := repo.Git(ctx, root, "rev-parse", "--short", "HEAD")
		fmt.Fprintf(out, "committed %s %q\n", sha, commitMessage(v))
	}
	if !opts.SkipTests {
		test := opts.Test
		if test == nil {
			test = makeTest(root)
		}
		if err := test(ctx, out); err != nil {
			return fmt.Errorf("the tests failed, nothing is tagged (the go.mod commit, if any, stays; run again once fixed): %w", err)
		}
	}
	var tags []string
	for _, m := range libs {
		tag := m.Tag(v)
		target := "HEAD"
		if m.Command {
			sha, dropped, err := commandCommit(ctx, root, m, mods, v)
			if err != nil {
				return fmt.Errorf("%s: %w (tags made so far: %s)", m.Path, err, strings.Join(tags, " "))
			}
			target = sha
			fmt.Fprintf(out, "commit %s: %s without the replaces of %s (on no branch)\n", sha[:min(len(sha), 12)], m.ModFile(), strings.Join(dropped, ", "))
		}
		if _, err := repo.Git(ctx, root, "tag", "-a", tag, "-m", m.Path+" "+v, target); err != nil {
			if len(tags) > 0 {
				return fmt.Errorf("%w (tags made so far: %s)", err, strings.Join(tags, " "))
			}
			return err
		}
		tags = append(tags, tag)
		fmt.Fprintf(out, "tagged %s\n", tag)
	}
	fmt.Fprintln(out, "nothing is pushed; to publish:")
	if len(files) > 0 {
		if branch, err := repo.Git(ctx, root, "symbolic-ref", "--short", "-q", "HEAD"); err == nil && branch != "" {
			fmt.Fprintf(out, "  git push origin %s\n", branch)
		}
	}
	fmt.Fprintf(out, "  git push origin %s\n", strings.Join(tags, " "))
	return nil
}

func commitMessage(v string) string { return "release " + v + ": modules require " + v }

func makeTest(root string) func(ctx context.Context, out io.Writer) error {
	return func(ctx context.Context, out io.Writer) error {
		cmd := exec.CommandContext(ctx, "make", "test")
		cmd.Dir = root
		cmd.Stdout = out
		cmd.Stderr = out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("make test: %w", err)
		}
		return nil
	}
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}
