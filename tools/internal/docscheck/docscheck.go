// Package docscheck checks markdown documentation against the repository
// it documents:
//
//   - every relative link and image resolves to a file or directory of the
//     repository (a link starting with "/" from the repository root, as
//     GitHub resolves it);
//   - a "#anchor" on a markdown target (or alone, for the same file) names
//     one of its headings, by GitHub's slug of the heading text ("## The
//     Receiver (v2)" is #the-receiver-v2, a second "## Usage" is #usage-1),
//     or an id or name attribute of its raw HTML;
//   - every fenced code block whose info string is "go run" (```go run) is
//     a complete Go file, with its package clause, that compiles: each is
//     built (go build, then go vet) as a package of a temporary module
//     that requires every library module of the repository, replaced by
//     its directory (GOWORK=off). A failure is reported at the markdown
//     line of the snippet's failing line.
//
// Absolute links (with a scheme or host) are not fetched. Links in raw
// HTML (<a href>, <img src>) are not checked.
package docscheck

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/dedup-go/dedup/tools/internal/repo"
)

// Marker is the info string of a fenced code block that must compile.
const Marker = "go run"

// Problem is one thing wrong in a markdown file.
type Problem struct {
	// File is the markdown file, relative to the repository root.
	File string
	// Line is the 1-based line in File.
	Line int
	// Msg says what is wrong.
	Msg string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg) }

// Options configures Check.
type Options struct {
	// Root is the repository root: links starting with "/" resolve there,
	// no link may leave it, and snippets may import its library modules.
	Root string
	// Files are the markdown files to check.
	Files []string
	// Go is the go command; "" means "go".
	Go string
	// Env is added to the environment of the go commands.
	Env []string
}

// Stats counts what Check looked at.
type Stats struct {
	Files, Links, Snippets int
}

// DefaultFiles returns the markdown files checked by default in the
// repository at root: README.md and every *.md under docs/.
func DefaultFiles(root string) ([]string, error) {
	var files []string
	if _, err := os.Stat(filepath.Join(root, "README.md")); err == nil {
		files = append(files, filepath.Join(root, "README.md"))
	}
	docs := filepath.Join(root, "docs")
	if _, err := os.Stat(docs); err != nil {
		return files, nil
	}
	err := filepath.WalkDir(docs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.EqualFold(filepath.Ext(p), ".md") {
			files = append(files, p)
		}
		return nil
	})
	return files, err
}

type checker struct {
	opts Options
	root string
	docs map[string]*doc
}

// Check checks opts.Files and returns the problems found, sorted by file
// and line. The error is for a check that could not run.
func Check(ctx context.Context, opts Options) ([]Problem, Stats, error) {
	var st Stats
	root, err := filepath.Abs(opts.Root)
	if err != nil {
		return nil, st, err
	}
	c := &checker{opts: opts, root: root, docs: map[string]*doc{}}
	var problems []Problem
	var snips []located
	for _, f := range opts.Files {
		abs, err := filepath.Abs(f)
		if err != nil {
			return nil, st, err
		}
		d, err := c.load(abs)
		if err != nil {
			return nil, st, err
		}
		st.Files++
		for _, l := range d.links {
			st.Links++
			if msg := c.checkLink(d, l); msg != "" {
				problems = append(problems, Problem{File: c.rel(d.path), Line: l.line, Msg: msg})
			}
		}
		for _, s := range d.snippets {
			snips = append(snips, located{file: c.rel(d.path), snippet: s})
		}
	}
	st.Snippets = len(snips)
	if len(snips) > 0 {
		ps, err := c.compile(ctx, snips)
		if err != nil {
			return nil, st, err
		}
		problems = append(problems, ps...)
	}
	sort.SliceStable(problems, func(i, j int) bool {
		if problems[i].File != problems[j].File {
			return problems[i].File < problems[j].File
		}
		return problems[i].Line < problems[j].Line
	})
	return problems, st, nil
}

func (c *checker) load(abs string) (*doc, error) {
	if d, ok := c.docs[abs]; ok {
		return d, nil
	}
	d, err := parseFile(abs)
	if err != nil {
		return nil, err
	}
	c.docs[abs] = d
	return d, nil
}

func (c *checker) rel(abs string) string {
	if r, err := filepath.Rel(c.root, abs); err == nil && !strings.HasPrefix(r, "..") {
		return filepath.ToSlash(r)
	}
	return abs
}

// checkLink returns what is wrong with link l of d, or "".
func (c *checker) checkLink(d *doc, l link) string {
	what := "link"
	if l.image {
		what = "image"
	}
	dest := strings.TrimSpace(l.dest)
	if dest == "" {
		return "empty " + what
	}
	u, err := url.Parse(dest)
	if err != nil {
		return fmt.Sprintf("bad %s %q: %v", what, dest, err)
	}
	if u.Scheme != "" || u.Host != "" || strings.HasPrefix(dest, "//") {
		return "" // absolute: not fetched
	}
	target := d.path
	if u.Path != "" {
		if strings.HasPrefix(u.Path, "/") {
			target = filepath.Join(c.root, filepath.FromSlash(u.Path))
		} else {
			target = filepath.Join(filepath.Dir(d.path), filepath.FromSlash(u.Path))
		}
		if r, err := filepath.Rel(c.root, target); err != nil || r == ".." || strings.HasPrefix(r, "../") {
			return fmt.Sprintf("broken %s %q: it leaves the repository", what, dest)
		}
		info, err := os.Stat(target)
		if err != nil {
			return fmt.Sprintf("broken %s %q: %s does not exist", what, dest, c.rel(target))
		}
		if info.IsDir() || !isMarkdown(target) {
			return "" // anchors are checked on markdown files only
		}
	}
	if u.Fragment == "" {
		return ""
	}
	td, err := c.load(target)
	if err != nil {
		return fmt.Sprintf("broken %s %q: %v", what, dest, err)
	}
	if td.anchors[u.Fragment] {
		return ""
	}
	msg := fmt.Sprintf("broken anchor %q: %s has no heading #%s", dest, c.rel(target), u.Fragment)
	for a := range td.anchors {
		if strings.EqualFold(a, u.Fragment) {
			msg += fmt.Sprintf(" (did you mean #%s?)", a)
			break
		}
	}
	return msg
}

func isMarkdown(p string) bool {
	ext := strings.ToLower(filepath.Ext(p))
	return ext == ".md" || ext == ".markdown"
}

// located is a snippet and the file it is in.
type located struct {
	file string
	snippet
}

// snippetLine finds "s003/main.go:12:5: msg" (or ./s003/...) in go's
// output.
var snippetLine = regexp.MustCompile(`(?:^|[\s./])s(\d+)/main\.go:(\d+)(?::\d+)?:\s*(.*)$`)

// compile builds every snippet as a package sNNN of one temporary module
// and returns the problems, at the markdown lines.
func (c *checker) compile(ctx context.Context, snips []located) ([]Problem, error) {
	mods, err := repo.Modules(c.root)
	if err != nil {
		return nil, err
	}
	libs := repo.Libraries(mods)
	rootMod, err := repo.ParseMod(c.root, libs[0])
	if err != nil {
		return nil, err
	}
	goVersion := "1.26.0"
	if rootMod.Go != nil {
		goVersion = rootMod.Go.Version
	}
	tmp, err := os.MkdirTemp("", "docscheck-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	var gomod, gosum bytes.Buffer
	fmt.Fprintf(&gomod, "module docscheck.example/snippets\n\ngo %s\n\nrequire (\n", goVersion)
	for _, m := range libs {
		fmt.Fprintf(&gomod, "\t%s v0.0.0-00010101000000-000000000000\n", m.Path)
	}
	gomod.WriteString(")\n\nreplace (\n")
	sums := map[string]bool{}
	var sumLines []string
	for _, m := range libs {
		dir := filepath.Join(c.root, filepath.FromSlash(m.Dir))
		fmt.Fprintf(&gomod, "\t%s => %s\n", m.Path, strconv.Quote(dir))
		// The modules' go.sum lines spare the checksum database lookups.
		data, _ := os.ReadFile(filepath.Join(dir, "go.sum"))
		for _, l := range strings.Split(string(data), "\n") {
			if l != "" && !sums[l] {
				sums[l] = true
				sumLines = append(sumLines, l)
			}
		}
	}
	gomod.WriteString(")\n")
	slices.Sort(sumLines)
	for _, l := range sumLines {
		gosum.WriteString(l + "\n")
	}
	if err := os.WriteFile(filepath.Join(tmp, "go.mod"), gomod.Bytes(), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "go.sum"), gosum.Bytes(), 0o644); err != nil {
		return nil, err
	}
	for i, s := range snips {
		dir := filepath.Join(tmp, fmt.Sprintf("s%03d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "main.go"), s.code, 0o644); err != nil {
			return nil, err
		}
	}

	goCmd := c.opts.Go
	if goCmd == "" {
		goCmd = "go"
	}
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
	env = append(env, c.opts.Env...)
	run := func(args ...string) (string, bool) {
		cmd := exec.CommandContext(ctx, goCmd, args...)
		cmd.Dir = tmp
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err == nil
	}
	// tidy -e adds what the snippets import from outside the repository's
	// modules; what it cannot find, the build reports at the import.
	run("mod", "tidy", "-e")
	seen := map[Problem]bool{}
	var problems []Problem
	for _, args := range [][]string{{"build", "-o", filepath.Join(tmp, "bin") + string(filepath.Separator), "./..."}, {"vet", "./..."}} {
		out, ok := run(args...)
		if ok {
			continue
		}
		found := false
		for _, l := range strings.Split(out, "\n") {
			m := snippetLine.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			i, _ := strconv.Atoi(m[1])
			n, _ := strconv.Atoi(m[2])
			if i >= len(snips) {
				continue
			}
			p := Problem{File: snips[i].file, Line: snips[i].line + n - 1, Msg: "go run snippet: " + m[3]}
			found = true
			if !seen[p] {
				seen[p] = true
				problems = append(problems, p)
			}
		}
		if !found && len(problems) == 0 {
			return nil, fmt.Errorf("go %s failed on the snippets, at no snippet line:\n%s", strings.Join(args, " "), out)
		}
		if len(problems) > 0 {
			break // vet would repeat the build's errors
		}
	}
	return problems, nil
}
