package cli

import (
	"flag"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/cmd/dedupctl/internal/transcript"
	deduphttp "github.com/dedup-go/dedup/middleware/http"
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
	doc, err := transcript.Load(operationsDoc, "## dedupctl")
	require.NoError(t, err)
	s, flags := postgresBackend(t).fresh(t)
	seedTranscript(t, s)

	seen := map[string]bool{}
	for _, r := range doc.Runs() {
		c := transcript.Subcommand(r.Args)
		if !slices.Contains(transcribed, c) {
			continue
		}
		seen[c] = true
		res := runIn(t, "", false, with(flags, r.Args...)...)
		got := strings.Split(strings.TrimSuffix(res.out+res.err, "\n"), "\n")
		if *update {
			doc.Set(r, got)
			continue
		}
		assert.Equal(t, normalise(doc.Output(r)), normalise(got), "line %d: $ dedupctl %s (go test -run TestTranscript -update rewrites it)",
			r.Line+1, strings.Join(r.Args, " "))
	}
	for _, c := range []string{"get", "scan", "stats"} {
		assert.True(t, seen[c], "the transcript shows dedupctl %s", c)
	}
	if *update {
		require.NoError(t, doc.Write())
	}
}

var (
	timeRE     = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
	tokenRE    = regexp.MustCompile(`\b[0-9a-f]{32}\b`)
	durationRE = regexp.MustCompile(`\((in |ended )?\d+[dhms](\d+[hms])?( ago)?\)`)
	spacesRE   = regexp.MustCompile(` {2,}`)
)

// normalise makes lines comparable across runs: times, durations and
// claim tokens (fresh random values) are replaced by placeholders and the
// padding of columns is collapsed (a time's width changes with it).
func normalise(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		l = timeRE.ReplaceAllString(l, "TIME")
		l = tokenRE.ReplaceAllString(l, "TOKEN")
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

	// Tenant acme's payment, recorded by the HTTP middleware itself. The
	// page forgets it (HTTP and gRPC record keys) before it shows stats.
	idem, err := deduphttp.New(s, &deduphttp.Options{
		Config:    &dedup.Config{Namespace: "payments-http", Retention: day},
		Principal: func(r *http.Request) string { return r.Header.Get("X-Tenant") },
	})
	require.NoError(t, err)
	r := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(`{"cents":1250}`))
	r.Header.Set("X-Tenant", "acme")
	r.Header.Set("Idempotency-Key", "pay-7")
	w := httptest.NewRecorder()
	idem.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) })).ServeHTTP(w, r)
	require.Equal(t, http.StatusCreated, w.Code)
}
