package transcript_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/cmd/dedupctl/internal/transcript"
)

const page = "# Ops\n\n## dedupctl\n\n```console\n$ export X=1\n$ dedupctl get a:1\nold 1\nold 2\n$ dedupctl scan\nold 3\n```\n\n### Redrive\n\n```console\n$ dedupctl redrive nats --dry-run\nold 4\n```\n\n## Next\n\n```console\n$ dedupctl stats\nnot ours\n```\n"

// TestLoadAndWrite: the runs of a section and of a subsection, their
// output lines up to the next command or the block's end, and a rewrite
// that replaces only the output given.
func TestLoadAndWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ops.md")
	require.NoError(t, os.WriteFile(path, []byte(page), 0o644))

	d, err := transcript.Load(path, "## dedupctl")
	require.NoError(t, err)
	var got [][]string
	for _, r := range d.Runs() {
		got = append(got, append([]string{transcript.Subcommand(r.Args)}, d.Output(r)...))
	}
	require.Equal(t, [][]string{{"get", "old 1", "old 2"}, {"scan", "old 3"}, {"redrive", "old 4"}}, got,
		"a ## section takes its ### subsections, up to the next ## heading")

	sub, err := transcript.Load(path, "### Redrive")
	require.NoError(t, err)
	require.Len(t, sub.Runs(), 1)
	require.Equal(t, []string{"nats", "--dry-run"}, sub.Runs()[0].Args[1:])

	d.Set(d.Runs()[0], []string{"new 1"})
	d.Set(d.Runs()[2], []string{"new 4a", "new 4b"})
	require.NoError(t, d.Write())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "# Ops\n\n## dedupctl\n\n```console\n$ export X=1\n$ dedupctl get a:1\nnew 1\n$ dedupctl scan\nold 3\n```\n\n### Redrive\n\n```console\n$ dedupctl redrive nats --dry-run\nnew 4a\nnew 4b\n```\n\n## Next\n\n```console\n$ dedupctl stats\nnot ours\n```\n", string(b))

	_, err = transcript.Load(path, "## Missing")
	require.Error(t, err)
}
