// Package repo finds the Go modules of a multi-module git repository and
// tells which of them are released: the library modules, tagged
// <dir>/vX.Y.Z (the root module vX.Y.Z) as the go command expects of a
// module in a subdirectory.
package repo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
)

// NonLibrary lists the directories (relative to the repository root, slash
// separated) whose modules, and every module below them, are never
// released: examples, benchmarks and developer tools.
var NonLibrary = []string{"examples", "bench", "tools"}

// TestOnlyMarker, a line of its own in a go.mod (before the module
// directive, by convention), marks a test-only module: one that holds
// only tests (_test.go files), kept apart so that the module it tests
// need not require what they alone use (end-to-end tests on several
// brokers). A test-only module is never released, wherever it is.
const TestOnlyMarker = "// dedup:test-only"

// Module is one go.mod of the repository.
type Module struct {
	// Dir is the module's directory relative to the repository root,
	// slash separated; "." for the root module.
	Dir string
	// Path is the module path its go.mod declares.
	Path string
	// Library reports whether the module is released: neither under a
	// NonLibrary directory nor test-only.
	Library bool
	// TestOnly reports whether the module's go.mod holds TestOnlyMarker.
	TestOnly bool
	// Command reports whether the module's root package is a program
	// (package main), which users install with go install PATH@VERSION.
	// The go command refuses to install a module whose go.mod holds
	// replace directives, so a release tags a command module on a commit
	// of its own without them.
	Command bool
}

// Tag returns the git tag of the module at version: "v0.1.0" for the root
// module, "adapters/kafka/v0.1.0" for the module in adapters/kafka.
func (m Module) Tag(version string) string {
	if m.Dir == "." {
		return version
	}
	return m.Dir + "/" + version
}

// Subdir returns the module's directory as x/mod/zip wants it: "" for the
// root.
func (m Module) Subdir() string {
	if m.Dir == "." {
		return ""
	}
	return m.Dir
}

// Modules returns every module of the repository at root, the root module
// first and the others sorted by directory. Directories named testdata or
// vendor, or starting with "." or "_", are skipped, as the go command
// skips them. A library module whose path is not the root module's path
// joined with its directory is an error: the go command could not find its
// tags.
func Modules(root string) ([]Module, error) {
	rootMod, testOnly, err := readMod(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	if testOnly {
		return nil, fmt.Errorf("%s: the root module cannot be test-only", filepath.Join(root, "go.mod"))
	}
	mods := []Module{{Dir: ".", Path: rootMod, Library: true}}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() != "go.mod" || filepath.Dir(p) == root {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(rel)
		mp, testOnly, err := readMod(p)
		if err != nil {
			return err
		}
		if testOnly {
			if err := onlyTests(filepath.Dir(p)); err != nil {
				return err
			}
		}
		m := Module{Dir: dir, Path: mp, Library: !nonLibrary(dir) && !testOnly, TestOnly: testOnly}
		if m.Command, err = isCommand(filepath.Dir(p)); err != nil {
			return err
		}
		if m.Library && mp != rootMod+"/"+dir {
			return fmt.Errorf("%s: module %s should be %s/%s: its tags %s/vX.Y.Z would not be found", p, mp, rootMod, dir, dir)
		}
		mods = append(mods, m)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(mods[1:], func(a, b Module) int { return strings.Compare(a.Dir, b.Dir) })
	return mods, nil
}

// Libraries returns the library modules of mods.
func Libraries(mods []Module) []Module {
	var out []Module
	for _, m := range mods {
		if m.Library {
			out = append(out, m)
		}
	}
	return out
}

// Own reports whether path is the module path of one of mods.
func Own(mods []Module, modPath string) bool {
	return slices.ContainsFunc(mods, func(m Module) bool { return m.Path == modPath })
}

// isCommand reports whether the Go files of dir (tests aside) are
// package main.
func isCommand(dir string) (bool, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return false, err
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		pf, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.PackageClauseOnly)
		if err != nil {
			return false, err
		}
		return pf.Name.Name == "main", nil
	}
	return false, nil
}

func nonLibrary(dir string) bool {
	for _, nl := range NonLibrary {
		if dir == nl || strings.HasPrefix(dir, nl+"/") {
			return true
		}
	}
	return false
}

// readMod returns the module path file declares, and whether it holds
// TestOnlyMarker.
func readMod(file string) (string, bool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", false, err
	}
	p := modfile.ModulePath(data)
	if p == "" {
		return "", false, fmt.Errorf("%s: no module directive", file)
	}
	testOnly := slices.ContainsFunc(strings.Split(string(data), "\n"), func(l string) bool {
		return strings.TrimSpace(l) == TestOnlyMarker
	})
	return p, testOnly, nil
}

// onlyTests fails if the module in dir (its nested modules aside) holds a
// Go file that is not a test: a test-only module is never released, so a
// package of it could never be used.
func onlyTests(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p == dir {
				return nil
			}
			name := d.Name()
			if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			return fmt.Errorf("%s: a test-only module (%s in its go.mod) holds only _test.go files: it is never released", p, TestOnlyMarker)
		}
		return nil
	})
}

// ParseMod parses the go.mod of module m in the repository at root.
func ParseMod(root string, m Module) (*modfile.File, error) {
	file := filepath.Join(root, filepath.FromSlash(m.Dir), "go.mod")
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return modfile.Parse(file, data, nil)
}

// Git runs git with args in dir and returns its standard output, trimmed.
// The error holds git's standard error.
func Git(ctx context.Context, dir string, args ...string) (string, error) {
	out, err := GitRaw(ctx, dir, args...)
	return strings.TrimSpace(string(out)), err
}

// GitRaw runs git with args in dir and returns its standard output as it
// is. The error holds git's standard error.
func GitRaw(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return nil, fmt.Errorf("git %s: %s", strings.Join(args, " "), msg)
	}
	return stdout.Bytes(), nil
}

// Toplevel returns the root of the git work tree holding dir.
func Toplevel(ctx context.Context, dir string) (string, error) {
	return Git(ctx, dir, "rev-parse", "--show-toplevel")
}

// TagExists reports whether the repository at root has the tag.
func TagExists(ctx context.Context, root, tag string) (bool, error) {
	cmd := exec.CommandContext(ctx, "git", "rev-parse", "-q", "--verify", "refs/tags/"+tag)
	cmd.Dir = root
	err := cmd.Run()
	if err == nil {
		return true, nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 {
		return false, nil
	}
	return false, fmt.Errorf("git rev-parse %s: %w", tag, err)
}

// ModFile returns the path of module m's go.mod relative to the root,
// slash separated.
func (m Module) ModFile() string { return path.Join(m.Dir, "go.mod") }
