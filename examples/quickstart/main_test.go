package main

import (
	"bytes"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestQuickstart runs the scenario and checks what it reports: each order
// charged once, the duplicates answered with the first receipt, the frozen
// worker refused, the poison message dead-lettered.
func TestQuickstart(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out))
	report := out.String()
	t.Log("\n" + report)

	for _, id := range []string{"order-1", "order-2", "order-3", "order-4", "order-5", "order-6"} {
		require.Regexp(t, regexp.MustCompile(`(?m)^`+id+`  charged 1 time\(s\)`), report)
	}
	require.Contains(t, report, "Every order charged exactly once: true")
	require.Equal(t, 7, countMatches(report, `(?m)^    worker-[c-j]: duplicate `)+countMatches(report, `(?m)^    worker-[c-j]: processed `)-1,
		"eight concurrent copies of order 3: one processed, seven duplicates")
	require.Equal(t, 1, countMatches(report, `(?m)^    worker-[c-j]: processed `))
	require.Contains(t, report, "worker-a: in flight elsewhere -> retry in 30s")
	require.Contains(t, report, "worker-a: processed ch_006 (attempt 2)")
	require.Contains(t, report, "worker-z: woke up after losing its lease")
	require.Contains(t, report, "dead-lettered (no-key)")
	require.NotContains(t, report, "ch_from_the_frozen_worker")
}

func countMatches(s, re string) int { return len(regexp.MustCompile(re).FindAllString(s, -1)) }
