package redrive_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/cmd/dedupctl/internal/transcript"
)

var update = flag.Bool("update", false, "rewrite the redrive transcript of docs/operations.md with this run's output")

// operationsDoc holds the transcript, in its "### Redrive" subsection.
const operationsDoc = "../../../../docs/operations.md"

// TestTranscript: the `$ dedupctl redrive` lines of the ```console blocks
// of the Redrive subsection of docs/operations.md print what the doc
// shows (stdout, then stderr), up to times and column padding, for the
// dead letters the doc describes, made here by the adapter one at a time
// (so that their stream sequences are the doc's). The doc's names
// (ORDERS_DLQ, orders.created...) stand for the test's own. go test -run
// TestTranscript -update rewrites the output lines.
func TestTranscript(t *testing.T) {
	t.Parallel()
	doc, err := transcript.Load(operationsDoc, "### Redrive")
	require.NoError(t, err)

	e := newNATSEnv(t)
	names := strings.NewReplacer(e.dlqStream, "ORDERS_DLQ", e.stream, "ORDERS", e.dlq, "orders.dlq", e.subject, "orders.created")
	back := strings.NewReplacer("ORDERS_DLQ", e.dlqStream)
	seedTranscript(t, e)
	env := []string{"DEDUP_NATS_URL=" + e.url, "DEDUP_REDIS_URL=" + e.st.flags[1], "DEDUP_PREFIX=" + e.st.flags[3], "DEDUP_OUTPUT=table"}

	require.NotEmpty(t, doc.Runs(), "the Redrive subsection shows a $ dedupctl redrive line")

	for _, r := range doc.Runs() {
		args := make([]string, len(r.Args))
		for i, a := range r.Args {
			args[i] = back.Replace(a)
		}
		// The test's names are longer than the doc's: the table is aligned
		// again once they are replaced.
		got := realign(strings.Split(names.Replace(runPlain(t, env, args...)), "\n"))
		if *update {
			doc.Set(r, got)
			continue
		}
		require.Equal(t, normalise(doc.Output(r)), normalise(got), "line %d: $ dedupctl %s (go test -run TestTranscript -update rewrites it)",
			r.Line+1, strings.Join(r.Args, " "))
	}
	if *update {
		require.NoError(t, doc.Write())
	}
}

// seedTranscript makes the doc's dead letters, one at a time: orders 1041
// to 1043 failed for good (1042 has been handled since, and 1043 is being
// handled now), a message without an id, and an order too large for the
// dead-letter stream, whose letter is cut.
func seedTranscript(t *testing.T, e *natsEnv) {
	t.Helper()
	s, err := e.js.Stream(t.Context(), e.dlqStream)
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	cfg.MaxMsgSize = 4096
	_, err = e.js.UpdateStream(t.Context(), cfg)
	require.NoError(t, err)
	for i, data := range [][]byte{
		orderJSON(t, Order{ID: "1041", Cents: 4200}),
		orderJSON(t, Order{ID: "1042", Cents: 1999}),
		orderJSON(t, Order{ID: "1043", Cents: 550}),
		[]byte(`{"cents": 300}`),
		orderJSON(t, Order{ID: "1044", Cents: 12000, Pad: strings.Repeat("x", 6000)}),
	} {
		e.publishData(t, data, nil)
		stop := e.consume(t, brokenReceiver(t, e.st, e.ns), false)
		e.waitDLQ(t, uint64(i+1))
		e.settled(t)
		stop()
	}
	completeRecord(t, e.st, "orders:1042")
	holdRecord(t, e.st, "orders:1043")
}

// runPlain runs dedupctl with args and env and returns its stdout then
// its stderr, without the final newline.
func runPlain(t *testing.T, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, dedupctl, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_ = cmd.Run() // the transcript shows what it printed, whatever its exit code
	require.NoError(t, ctx.Err())
	return strings.TrimSuffix(stdout.String()+stderr.String(), "\n")
}

var (
	timeRE   = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
	spacesRE = regexp.MustCompile(` {2,}`)
)

// normalise makes lines comparable across runs: times are replaced by a
// placeholder and the padding of columns is collapsed.
func normalise(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		l = timeRE.ReplaceAllString(l, "TIME")
		out[i] = strings.TrimRight(spacesRE.ReplaceAllString(l, "  "), " ")
	}
	return out
}

// realign pads the columns of the table rows of lines (those with cells
// apart by two spaces or more) as the tool's table does.
func realign(lines []string) []string {
	var widths []int
	cells := make([][]string, len(lines))
	for i, l := range lines {
		if !spacesRE.MatchString(l) {
			continue
		}
		cells[i] = spacesRE.Split(l, -1)
		for j, c := range cells[i] {
			if j >= len(widths) {
				widths = append(widths, 0)
			}
			widths[j] = max(widths[j], len(c))
		}
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		if cells[i] == nil {
			out[i] = l
			continue
		}
		var b strings.Builder
		for j, c := range cells[i] {
			b.WriteString(c)
			if j < len(cells[i])-1 {
				b.WriteString(strings.Repeat(" ", widths[j]-len(c)+2))
			}
		}
		out[i] = b.String()
	}
	return out
}
