// Package apicheck compares the API of every library module of the
// repository, as the work tree has it, with the module's API base: its
// latest release tag (DIR/vX.Y.Z, vX.Y.Z for the root module) or, while it
// has none, the commit named in BaseFile. It uses golang.org/x/exp/apidiff
// on each library package of the module (internal packages, main packages
// and test files left out), and says which changes are incompatible.
// Whether an incompatible change may ship under a version is BreakAllowed's
// rule; scripts/release.sh refuses one it does not allow, and make api-check
// refuses any.
package apicheck

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/exp/apidiff"
	"golang.org/x/mod/semver"
	"golang.org/x/tools/go/packages"

	"github.com/dedup-go/dedup/tools/internal/repo"
)

// BaseFile is the file, relative to the repository root, naming the API
// base of the modules that have no release tag yet: a line "COMMIT
// VERSION", where VERSION is the version whose API the commit stands for
// (v1: the v1 surface). Lines starting with # are comments.
const BaseFile = "tools/apicheck/base"

// Base is the state of a module its API is compared with.
type Base struct {
	// Rev is the git revision: the tag, or the commit of BaseFile.
	Rev string
	// Commit is Rev's commit hash.
	Commit string
	// Version is the version the base stands for: the tag's version, or
	// BaseFile's VERSION.
	Version string
	// Tagged reports whether Rev is a release tag of the module.
	Tagged bool
}

func (b Base) String() string {
	if b.Tagged {
		return b.Rev
	}
	return fmt.Sprintf("%s (%s, %s)", short(b.Commit), BaseFile, b.Version)
}

// Result is one library module's comparison.
type Result struct {
	Module repo.Module
	Base   Base
	// New reports that the module did not exist at its base; its packages
	// that existed there, in another module, are still compared (a
	// package carved out of a module into a module of its own keeps its
	// API).
	New bool
	// Packages counts the library packages compared (the work tree's).
	Packages int
	// Incompatible and Compatible are the changes, each "PACKAGE: change".
	Incompatible, Compatible []string
	// Notes says what is not a change of this module's API, such as a
	// package that moved to another module of the repository.
	Notes []string
}

// Options configures Check.
type Options struct {
	// Root is the root of the repository's git work tree.
	Root string
	// Out, if not nil, receives each module's result as it is known.
	Out io.Writer
}

// Check compares every library module of the repository at opts.Root
// with its base. It returns an error if a module cannot be loaded or has
// no base (no tag and no BaseFile).
func Check(ctx context.Context, opts Options) ([]Result, error) {
	root, err := filepath.Abs(opts.Root)
	if err != nil {
		return nil, err
	}
	mods, err := repo.Modules(root)
	if err != nil {
		return nil, err
	}
	c := &checker{root: root, trees: map[string]*tree{}}
	defer c.cleanup()
	var results []Result
	for _, m := range repo.Libraries(mods) {
		r, err := c.module(ctx, m, mods)
		if err != nil {
			return results, fmt.Errorf("api check of %s: %w", m.Path, err)
		}
		if opts.Out != nil {
			Print(opts.Out, r)
		}
		results = append(results, r)
	}
	return results, nil
}

// Print writes r as Check prints it.
func Print(w io.Writer, r Result) {
	var what string
	switch {
	case r.New && r.Packages == 0:
		what = "new module, no library package"
	case r.New:
		what = "new module"
	case r.Packages == 0:
		what = "no library package"
	case len(r.Incompatible) == 0 && len(r.Compatible) == 0:
		what = "no API change"
	default:
		what = fmt.Sprintf("%d incompatible, %d compatible changes", len(r.Incompatible), len(r.Compatible))
	}
	if r.New && (len(r.Incompatible) > 0 || len(r.Compatible) > 0) {
		what += fmt.Sprintf(" (its packages at the base: %d incompatible, %d compatible changes)", len(r.Incompatible), len(r.Compatible))
	}
	fmt.Fprintf(w, "%s: base %s: %s\n", r.Module.Path, r.Base, what)
	for _, s := range r.Incompatible {
		fmt.Fprintf(w, "  incompatible: %s\n", s)
	}
	for _, s := range r.Compatible {
		fmt.Fprintf(w, "  compatible:   %s\n", s)
	}
	for _, s := range r.Notes {
		fmt.Fprintf(w, "  note:         %s\n", s)
	}
}

// BreakAllowed reports whether an incompatible change may be released as
// version v of a module whose base stands for version base:
//   - a new major version (v2.0.0 after v1.x.y, v1.0.0-rc.1 after v0.x.y)
//     may break;
//   - before v1, a new minor version may (v0.3.0 after v0.2.x), as Go's
//     module conventions allow: v0 promises nothing;
//   - a minor or patch version of the same major from v1 on may not, nor
//     a v0 patch. A pre-release is its version's line: v1.0.0 after the
//     tag v1.0.0-rc.1 must keep rc.1's API.
func BreakAllowed(base, v string) bool {
	if semver.Compare(semver.Major(v), semver.Major(base)) > 0 {
		return true
	}
	return semver.Major(base) == "v0" && semver.Major(v) == "v0" &&
		semver.Compare(semver.MajorMinor(v), semver.MajorMinor(base)) > 0
}

// Refusals returns, for a release at version v, one message per module
// whose incompatible changes BreakAllowed refuses, naming the module and
// its changes.
func Refusals(results []Result, v string) []string {
	var out []string
	for _, r := range results {
		if len(r.Incompatible) == 0 || BreakAllowed(r.Base.Version, v) {
			continue
		}
		needs := "a new major version"
		if semver.Major(r.Base.Version) == "v0" {
			needs = "a new minor or major version"
		}
		out = append(out, fmt.Sprintf("%s %s would break the API of its base %s (an incompatible change needs %s):\n      %s",
			r.Module.Path, v, r.Base, needs, strings.Join(r.Incompatible, "\n      ")))
	}
	return out
}

// ReadBase reads BaseFile in the work tree at root: the commit (resolved
// in the repository) and the version it stands for.
func ReadBase(ctx context.Context, root string) (commit, version string, err error) {
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(BaseFile)))
	if err != nil {
		return "", "", fmt.Errorf("the API base of modules with no release tag: %w", err)
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	var f []string
	if len(lines) == 1 {
		f = strings.Fields(lines[0])
	}
	if len(f) != 2 || !semver.IsValid(f[1]) {
		return "", "", fmt.Errorf("%s: want one line \"COMMIT VERSION\" (such as \"0123abcd v1\"), have %q", BaseFile, strings.Join(lines, " | "))
	}
	commit, err = repo.Git(ctx, root, "rev-parse", "--verify", "-q", f[0]+"^{commit}")
	if err != nil {
		return "", "", fmt.Errorf("%s: commit %s is not in this repository (a shallow clone?): %w", BaseFile, f[0], err)
	}
	return commit, f[1], nil
}

// LatestTag returns the highest release tag of module m (DIR/vX.Y.Z, or
// vX.Y.Z for the root), pre-releases included; "" if it has none.
func LatestTag(ctx context.Context, root string, m repo.Module) (string, error) {
	prefix := m.Tag("")
	out, err := repo.Git(ctx, root, "tag", "--list", prefix+"v*")
	if err != nil {
		return "", err
	}
	best := ""
	for _, t := range strings.Fields(out) {
		v := strings.TrimPrefix(t, prefix)
		if !semver.IsValid(v) || semver.Canonical(v) != v || semver.Build(v) != "" {
			continue
		}
		if best == "" || semver.Compare(v, strings.TrimPrefix(best, prefix)) > 0 {
			best = t
		}
	}
	return best, nil
}

type checker struct {
	root  string
	trees map[string]*tree // by commit
	// base is BaseFile's commit and version, read once when needed.
	baseRead            bool
	baseCommit, baseVer string
	baseErr             error
}

// tree is a commit's files, extracted, its modules and their loaded
// packages.
type tree struct {
	dir  string
	mods []repo.Module
	pkgs map[string]map[string]*types.Package // by module directory
}

func (c *checker) cleanup() {
	for _, t := range c.trees {
		os.RemoveAll(t.dir)
	}
}

func (c *checker) base(ctx context.Context, m repo.Module) (Base, error) {
	tag, err := LatestTag(ctx, c.root, m)
	if err != nil {
		return Base{}, err
	}
	if tag != "" {
		commit, err := repo.Git(ctx, c.root, "rev-parse", "--verify", "-q", tag+"^{commit}")
		if err != nil {
			return Base{}, err
		}
		return Base{Rev: tag, Commit: commit, Version: strings.TrimPrefix(tag, m.Tag("")), Tagged: true}, nil
	}
	if !c.baseRead {
		c.baseRead = true
		c.baseCommit, c.baseVer, c.baseErr = ReadBase(ctx, c.root)
	}
	if c.baseErr != nil {
		return Base{}, fmt.Errorf("no release tag %sv*, and %w", m.Tag(""), c.baseErr)
	}
	return Base{Rev: c.baseCommit, Commit: c.baseCommit, Version: c.baseVer}, nil
}

// tree extracts the files of commit into a temporary directory, once.
func (c *checker) tree(ctx context.Context, commit string) (*tree, error) {
	if t, ok := c.trees[commit]; ok {
		return t, nil
	}
	dir, err := os.MkdirTemp("", "apicheck-"+short(commit)+"-")
	if err != nil {
		return nil, err
	}
	t := &tree{dir: dir, pkgs: map[string]map[string]*types.Package{}}
	c.trees[commit] = t
	if err := extract(ctx, c.root, commit, dir); err != nil {
		return nil, err
	}
	if t.mods, err = repo.Modules(dir); err != nil {
		return nil, fmt.Errorf("modules at %s: %w", short(commit), err)
	}
	return t, nil
}

// packagesOf loads (once) the library packages of the module in directory
// modDir of t.
func (t *tree) packagesOf(ctx context.Context, m repo.Module) (map[string]*types.Package, error) {
	if p, ok := t.pkgs[m.Dir]; ok {
		return p, nil
	}
	p, err := Load(ctx, filepath.Join(t.dir, filepath.FromSlash(m.Dir)), m.Path)
	if err != nil {
		return nil, err
	}
	t.pkgs[m.Dir] = p
	return p, nil
}

// owner returns the module of mods holding the package at import path p:
// the one with the longest module path that is p or a prefix of it.
func owner(mods []repo.Module, p string) (repo.Module, bool) {
	var best repo.Module
	found := false
	for _, m := range mods {
		if (p == m.Path || strings.HasPrefix(p, m.Path+"/")) && len(m.Path) > len(best.Path) {
			best, found = m, true
		}
	}
	return best, found
}

func (c *checker) module(ctx context.Context, m repo.Module, mods []repo.Module) (Result, error) {
	r := Result{Module: m}
	var err error
	if r.Base, err = c.base(ctx, m); err != nil {
		return r, err
	}
	cur, err := Load(ctx, filepath.Join(c.root, filepath.FromSlash(m.Dir)), m.Path)
	if err != nil {
		return r, err
	}
	r.Packages = len(cur)
	t, err := c.tree(ctx, r.Base.Commit)
	if err != nil {
		return r, err
	}
	old := map[string]*types.Package{}
	r.New = !slices.ContainsFunc(t.mods, func(bm repo.Module) bool { return bm.Dir == m.Dir && bm.Path == m.Path })
	if !r.New {
		if old, err = t.packagesOf(ctx, m); err != nil {
			return r, fmt.Errorf("at its base %s: %w", r.Base.Rev, err)
		}
	}
	// A package of the module that another module held at the base (one
	// carved out of it): compare it with its API there.
	for _, p := range sortedKeys(cur) {
		if _, ok := old[p]; ok {
			continue
		}
		bm, ok := owner(t.mods, p)
		if !ok || (bm.Dir == m.Dir && !r.New) || !bm.Library {
			continue
		}
		bp, err := t.packagesOf(ctx, bm)
		if err != nil {
			return r, fmt.Errorf("at its base %s, %s: %w", r.Base.Rev, bm.Path, err)
		}
		if op, ok := bp[p]; ok {
			old[p] = op
			r.Notes = append(r.Notes, fmt.Sprintf("%s: in %s at the base", p, bm.Path))
		}
	}
	for _, p := range sortedKeys(old) {
		np, ok := cur[p]
		if !ok {
			// Moved to another module of the repository: that module's
			// check compares it.
			if om, ok := owner(mods, p); ok && om.Dir != m.Dir && om.Library {
				if _, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(om.Dir), filepath.FromSlash(strings.TrimPrefix(strings.TrimPrefix(p, om.Path), "/")))); err == nil {
					r.Notes = append(r.Notes, fmt.Sprintf("%s: moved to module %s", p, om.Path))
					continue
				}
			}
			r.Incompatible = append(r.Incompatible, p+": package removed")
			continue
		}
		// apidiff may say one change twice (it did for a removed method of
		// the generic dedup.Receiver): say it once.
		seen := map[apidiff.Change]bool{}
		for _, ch := range apidiff.Changes(old[p], np).Changes {
			if seen[ch] {
				continue
			}
			seen[ch] = true
			if ch.Compatible {
				r.Compatible = append(r.Compatible, p+": "+ch.Message)
			} else {
				r.Incompatible = append(r.Incompatible, p+": "+ch.Message)
			}
		}
	}
	if !r.New {
		for _, p := range sortedKeys(cur) {
			if _, ok := old[p]; !ok {
				r.Compatible = append(r.Compatible, p+": package added")
			}
		}
	}
	return r, nil
}

// Load type-checks the library packages of the module at dir, whose path
// is modPath: every package of the module but main packages, packages
// under an internal directory and test files. It runs the go command
// with GOWORK=off (the module's own go.mod and replaces) and -trimpath,
// so that the build cache serves the same files in another directory.
func Load(ctx context.Context, dir, modPath string) (map[string]*types.Package, error) {
	cfg := &packages.Config{
		Context: ctx,
		Mode:    packages.NeedName | packages.NeedTypes | packages.NeedModule,
		Dir:     dir,
		Env:     append(os.Environ(), "GOWORK=off", "GOFLAGS=-trimpath", "GO111MODULE=on"),
	}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		return nil, err
	}
	out := map[string]*types.Package{}
	var errs []error
	for _, p := range pkgs {
		for _, e := range p.Errors {
			errs = append(errs, fmt.Errorf("%s: %s", p.PkgPath, e))
		}
		if p.Name == "main" || p.Module == nil || p.Module.Path != modPath || internal(strings.TrimPrefix(p.PkgPath, modPath)) {
			continue
		}
		if p.Types != nil {
			out[p.PkgPath] = p.Types
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("loading %s: %w", modPath, errors.Join(errs...))
	}
	return out, nil
}

func internal(rel string) bool {
	return slices.Contains(strings.Split(rel, "/"), "internal")
}

// extract writes the files of commit in the repository at root into dir.
func extract(ctx context.Context, root, commit, dir string) error {
	cmd := exec.CommandContext(ctx, "git", "archive", "--format=tar", commit)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	terr := untar(stdout, dir)
	if terr != nil {
		io.Copy(io.Discard, stdout)
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git archive %s: %w: %s", short(commit), err, strings.TrimSpace(stderr.String()))
	}
	return terr
}

func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(h.Name)
		if name == ".." || strings.HasPrefix(name, "../") || path.IsAbs(name) {
			return fmt.Errorf("archive entry %q outside the tree", h.Name)
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777|0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func short(commit string) string { return commit[:min(len(commit), 12)] }
