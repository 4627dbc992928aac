package cli

import (
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
)

var update = flag.Bool("update", false, "rewrite the dedupctl transcripts of docs/operations.md with this run's output")

// operationsDoc is the page whose "## dedupctl" section holds the
// transcripts.
const operationsDoc = "../../../../docs/operations.md"

// transcribed are the commands whose transcripts this test keeps true;
// other `$ dedupctl` lines of the section are another test's.
var transcribed = []string{"get", "scan", "stats", "forget"}

// TestTranscript: the ```console blocks of the dedupctl section of
// docs/operations.md are what the commands print (stdout, then stderr)
// for the store the doc describes, up to times and durations. The store
// is seeded here with the records the transcript shows. go test -run
// TestTranscript -update rewrites the blocks with this run's output.
func TestTranscript(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(operationsDoc)
	require.NoError(t, err)
	lines := strings.Split(string(doc), "\n")
	start := slices.Index(lines, "## dedupctl")
	require.NotEqual(t, -1, start, "docs/operations.md has a ## dedupctl section")
	end := len(lines)
	for i := start + 1; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "## ") {
			end = i
			break
		}
	}

	s, flags := postgresBackend(t).fresh(t)
	seedTranscript(t, s)

	// Each command's output runs from the line after it to the next
	// command or the end of its block; -update replaces those lines.
	type run struct {
		line     int // the command's line
		from, to int // its output lines, [from, to)
		args     []string
	}
	var runs []run
	seen := map[string]bool{}
	inBlock := false
	for i := start; i < end; i++ {
		switch l := lines[i]; {
		case l == "```console":
			inBlock = true
		case l == "```" && inBlock:
			inBlock = false
			if n := len(runs); n > 0 && runs[n-1].to == -1 {
				runs[n-1].to = i
			}
		case inBlock && strings.HasPrefix(l, "$ "):
			if n := len(runs); n > 0 && runs[n-1].to == -1 {
				runs[n-1].to = i
			}
			args := strings.Fields(strings.TrimPrefix(l, "$ "))
			if len(args) > 1 && args[0] == "dedupctl" && slices.Contains(transcribed, subcommand(args[1:])) {
				seen[subcommand(args[1:])] = true
				runs = append(runs, run{line: i, from: i + 1, to: -1, args: args[1:]})
			}
		}
	}
	for _, c := range []string{"get", "scan", "stats"} {
		assert.True(t, seen[c], "the transcript shows dedupctl %s", c)
	}

	var rewritten []string
	last := 0
	for _, r := range runs {
		res := runIn(t, "", false, with(flags, r.args...)...)
		got := strings.Split(strings.TrimSuffix(res.out+res.err, "\n"), "\n")
		want := lines[r.from:r.to]
		if *update {
			rewritten = append(append(rewritten, lines[last:r.from]...), got...)
			last = r.to
			continue
		}
		assert.Equal(t, normalise(want), normalise(got), "line %d: $ dedupctl %s (go test -run TestTranscript -update rewrites it)",
			r.line+1, strings.Join(r.args, " "))
	}
	if *update {
		rewritten = append(rewritten, lines[last:]...)
		require.NoError(t, os.WriteFile(operationsDoc, []byte(strings.Join(rewritten, "\n")), 0o644))
	}
}

// subcommand is the first argument that is not a flag.
func subcommand(args []string) string {
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			return a
		}
	}
	return ""
}

var (
	timeRE     = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
	durationRE = regexp.MustCompile(`\((in |ended )?\d+[dhms](\d+[hms])?( ago)?\)`)
	spacesRE   = regexp.MustCompile(` {2,}`)
)

// normalise makes lines comparable across runs: times and durations are
// replaced by placeholders and the padding of columns is collapsed (a
// time's width changes with it).
func normalise(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		l = timeRE.ReplaceAllString(l, "TIME")
		l = durationRE.ReplaceAllString(l, "(${1}D${3})")
		out[i] = strings.TrimRight(spacesRE.ReplaceAllString(l, "  "), " ")
	}
	return out
}

// seedTranscript writes the records the transcript shows.
func seedTranscript(t *testing.T, s seedStore) {
	const day = 24 * time.Hour
	put := func(key string, result string, fp string, errs ...string) {
		for _, e := range errs {
			c := claim(t, s, key, time.Minute, fp)
			require.NoError(t, s.Release(t.Context(), store.ReleaseRequest{Key: key, Token: c.Token, Error: e, Retention: day}))
		}
		if result != "" {
			c := claim(t, s, key, time.Minute, fp)
			require.NoError(t, s.Complete(t.Context(), store.CompleteRequest{Key: key, Token: c.Token, Result: []byte(result), Retention: day}))
		}
	}
	stuck(t, s, "orders:1041")
	put("orders:1042", `{"charged":4200,"currency":"EUR"}`, "sha256:5e8f1c2a9b7d", "payment gateway: timeout after 5s")
	put("orders:1043", "", "", "payment gateway: timeout after 5s", "payment gateway: timeout after 5s", "payment gateway: timeout after 5s")
	put("orders:1044", "", "", "card declined")
	claim(t, s, "orders:1045", 30*time.Second, "")
	put("billing:7", `{"invoice":"INV-7"}`, "")
	put("billing:8", "", "", "payment gateway: timeout after 5s")
}
