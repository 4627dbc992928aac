package cli

import (
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testStats: stats counts records by namespace and state, names the
// processing record whose lease ends first (a stuck one), and groups
// failed records by last error, the most frequent first.
func testStats(t *testing.T, b backend) {
	s, flags := b.fresh(t)
	completed(t, s, "a:1", []byte(`1`))
	completed(t, s, "a:2", []byte(`2`), "timeout")
	failed(t, s, "a:3", "timeout")
	failed(t, s, "a:4", "declined", "timeout")
	failed(t, s, "a:5", "declined")
	claim(t, s, "a:6", time.Hour, "")
	stuck(t, s, "a:7")
	claim(t, s, "b:1", 30*time.Minute, "")
	failed(t, s, "b:2", "timeout")
	completed(t, s, "b:3", nil)

	get := func(t *testing.T, args ...string) statsJSON {
		t.Helper()
		r := run(t, with(flags, append([]string{"-o", "json", "stats"}, args...)...)...)
		require.Equal(t, 0, r.code, r.err)
		got := lines[statsJSON](t, r.out)
		require.Len(t, got, 1, "one JSON object")
		return got[0]
	}

	st := get(t)
	assert.Equal(t, []stateCounts{
		{Namespace: "a", Processing: 2, Completed: 2, Failed: 3, Total: 7},
		{Namespace: "b", Processing: 1, Completed: 1, Failed: 1, Total: 3},
	}, st.Namespaces)
	assert.Equal(t, stateCounts{Processing: 3, Completed: 3, Failed: 4, Total: 10}, st.Total)
	require.NotNil(t, st.OldestProcessing)
	assert.Equal(t, "a:7", st.OldestProcessing.Key, "the stuck lease, ended before the others")
	assert.Equal(t, []errorGroup{
		{LastError: "timeout", Count: 3, ExampleKey: exampleOf(st, "timeout")},
		{LastError: "declined", Count: 1, ExampleKey: "a:5"},
	}, st.FailedByError, "a:4's last error is its last attempt's")
	assert.Contains(t, []string{"a:3", "a:4", "b:2"}, exampleOf(st, "timeout"))

	st = get(t, "--namespace", "b", "--top", "1")
	assert.Equal(t, []stateCounts{{Namespace: "b", Processing: 1, Completed: 1, Failed: 1, Total: 3}}, st.Namespaces)
	assert.Equal(t, "b:1", st.OldestProcessing.Key)
	assert.Equal(t, []errorGroup{{LastError: "timeout", Count: 1, ExampleKey: "b:2"}}, st.FailedByError)

	st = get(t, "--namespace", "none")
	assert.Empty(t, st.Namespaces)
	assert.Nil(t, st.OldestProcessing)
	assert.Empty(t, st.FailedByError)

	t.Run("table", func(t *testing.T) {
		r := run(t, with(flags, "stats", "--top", "1")...)
		require.Equal(t, 0, r.code, r.err)
		for _, line := range []string{
			`NAMESPACE +PROCESSING +COMPLETED +FAILED +TOTAL`,
			`a +2 +2 +3 +7`,
			`b +1 +1 +1 +3`,
			`\(all\) +3 +3 +4 +10`,
			`OLDEST PROCESSING +ATTEMPT +LEASE UNTIL`,
			`a:7 +1 +\S+ \(ended [0-9ms]+ ago\)`,
			`FAILED +LAST ERROR +EXAMPLE KEY`,
			`3 +timeout +(a:3|a:4|b:2)`,
		} {
			assert.Regexp(t, regexp.MustCompile(`(?m)^`+line+`$`), r.out)
		}
		assert.NotContains(t, r.out, "declined", "--top 1")
		assert.Equal(t, ExitUsage, run(t, with(flags, "stats", "--top", "-1")...).code)
	})
}

func exampleOf(st statsJSON, lastError string) string {
	for _, g := range st.FailedByError {
		if g.LastError == lastError {
			return g.ExampleKey
		}
	}
	return ""
}
