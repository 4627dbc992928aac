// Package transcript keeps the console transcripts of a Markdown page
// true to the commands: it finds the `$ dedupctl ...` lines of the
// ```console blocks of one section and the output lines after each (up to
// the next command or the block's end), so that a test can compare them
// with what a run prints, or rewrite them with it (-update). The
// commands' tests use it on docs/operations.md.
package transcript

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// Run is one command of a transcript.
type Run struct {
	Line     int      // the command's line, from 0
	From, To int      // its output lines in the page, [From, To)
	Args     []string // its arguments after "dedupctl"
}

// Doc is a page and the runs of one of its sections.
type Doc struct {
	path  string
	lines []string
	runs  []Run
	got   map[int][]string // new output by the run's Line
}

// Load reads the Markdown page at path and the runs of its section headed
// by the line heading ("## dedupctl"), which ends at the next heading of
// its level or above.
func Load(path, heading string) (*Doc, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	d := &Doc{path: path, lines: strings.Split(string(b), "\n"), got: map[int][]string{}}
	start := slices.Index(d.lines, heading)
	if start == -1 {
		return nil, fmt.Errorf("%s has no line %q", path, heading)
	}
	level := strings.Index(heading, " ")
	end := len(d.lines)
	for i := start + 1; i < len(d.lines); i++ {
		if l := d.lines[i]; strings.HasPrefix(l, "#") {
			if n := strings.Index(l, " "); n > 0 && n <= level && strings.Trim(l[:n], "#") == "" {
				end = i
				break
			}
		}
	}
	inBlock := false
	closeLast := func(i int) {
		if n := len(d.runs); n > 0 && d.runs[n-1].To == -1 {
			d.runs[n-1].To = i
		}
	}
	for i := start; i < end; i++ {
		switch l := d.lines[i]; {
		case l == "```console":
			inBlock = true
		case l == "```" && inBlock:
			inBlock = false
			closeLast(i)
		case inBlock && strings.HasPrefix(l, "$ "):
			closeLast(i)
			if args := strings.Fields(strings.TrimPrefix(l, "$ ")); len(args) > 1 && args[0] == "dedupctl" {
				d.runs = append(d.runs, Run{Line: i, From: i + 1, To: -1, Args: args[1:]})
			}
		}
	}
	return d, nil
}

// Runs returns the section's `$ dedupctl` commands, in page order.
func (d *Doc) Runs() []Run { return d.runs }

// Output returns the output lines the page shows for r.
func (d *Doc) Output(r Run) []string { return d.lines[r.From:r.To] }

// Set takes got as r's output for Write.
func (d *Doc) Set(r Run, got []string) { d.got[r.Line] = got }

// Write writes the page back with the output of every run given to Set.
func (d *Doc) Write() error {
	var out []string
	last := 0
	for _, r := range d.runs {
		got, ok := d.got[r.Line]
		if !ok {
			continue
		}
		out = append(append(out, d.lines[last:r.From]...), got...)
		last = r.To
	}
	out = append(out, d.lines[last:]...)
	return os.WriteFile(d.path, []byte(strings.Join(out, "\n")), 0o644)
}

// Subcommand returns the first of args that is not a flag.
func Subcommand(args []string) string {
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			return a
		}
	}
	return ""
}
