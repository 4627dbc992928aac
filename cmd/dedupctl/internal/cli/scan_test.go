package cli

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testScan: scan lists the records of the store, a namespace, states and
// an id prefix, up to --limit.
func testScan(t *testing.T, b backend) {
	s, flags := b.fresh(t)
	completed(t, s, "a:x1", []byte(`1`))
	completed(t, s, "a:x2", []byte(`2`))
	completed(t, s, "a:y1", []byte(`3`))
	failed(t, s, "a:x3", "boom")
	failed(t, s, "a:y2", "boom")
	claim(t, s, "a:x4", time.Hour, "")
	completed(t, s, "b:x1", []byte(`4`))
	failed(t, s, "b:y1", "bang")
	// Enough records that a Cluster holds some on every master.
	for i := range 30 {
		completed(t, s, "c:"+strconv.Itoa(i), nil)
	}

	keys := func(t *testing.T, args ...string) []string {
		t.Helper()
		r := run(t, with(flags, append([]string{"-o", "json", "scan"}, args...)...)...)
		require.Equal(t, 0, r.code, r.err)
		var ks []string
		for _, rec := range lines[recordJSON](t, r.out) {
			assert.Nil(t, rec.Result, "scan shows no result, only its size")
			ks = append(ks, rec.Key)
		}
		slices.Sort(ks)
		return ks
	}

	all := keys(t)
	assert.Len(t, all, 38)

	// Its JSON carries each record's token and times, as get's does.
	r := run(t, with(flags, "-o", "json", "scan", "--namespace", "b")...)
	require.Equal(t, 0, r.code, r.err)
	for _, rec := range lines[recordJSON](t, r.out) {
		held, err := s.Get(t.Context(), rec.Key)
		require.NoError(t, err)
		assert.Equal(t, held.Token.String(), rec.Token, "%s: token", rec.Key)
		requireTime(t, held.CreatedAt, rec.CreatedAt, rec.Key+": created_at")
		requireTime(t, held.CompletedAt, rec.CompletedAt, rec.Key+": completed_at")
	}
	assert.Equal(t, []string{"a:x1", "a:x2", "a:x3", "a:x4", "a:y1", "a:y2"}, keys(t, "--namespace", "a"))
	assert.Equal(t, []string{"a:x3", "a:y2"}, keys(t, "--namespace", "a", "--state", "failed"))
	assert.Equal(t, []string{"a:x1", "a:x2", "a:x3", "a:y1", "a:y2"}, keys(t, "--namespace", "a", "--state", "completed,failed"))
	assert.Equal(t, []string{"a:x3", "a:x4", "a:y2", "b:y1"}, keys(t, "--state", "failed", "--state", "processing"))
	assert.Equal(t, []string{"a:x1", "a:x2", "a:x3", "a:x4"}, keys(t, "--namespace", "a", "--id-prefix", "x"))
	assert.Equal(t, []string{"a:x1", "a:x2", "a:x3", "a:x4", "b:x1"}, keys(t, "--id-prefix", "x"))
	assert.Empty(t, keys(t, "--namespace", "nothing"))
	assert.Len(t, keys(t, "--limit", "3"), 3)
	assert.Len(t, keys(t, "--namespace", "a", "--state", "completed", "--limit", "2"), 2)

	t.Run("table", func(t *testing.T) {
		r := run(t, with(flags, "scan", "--namespace", "a")...)
		require.Equal(t, 0, r.code, r.err)
		rows := strings.Split(strings.TrimSpace(r.out), "\n")
		require.Len(t, rows, 7, r.out)
		assert.Regexp(t, `^KEY +STATE +ATTEMPT +UNTIL +RESULT +LAST ERROR$`, rows[0])
		assert.Contains(t, r.out, "a:x4")
		assert.Regexp(t, regexp.MustCompile(`(?m)^a:x4 +processing +1 +lease \S+ \(in [0-9dhms]+\) +- +-$`), r.out)
		assert.Regexp(t, regexp.MustCompile(`(?m)^a:x3 +failed +1 +expires \S+ \(in [0-9dhms]+\) +- +boom$`), r.out)
		assert.Regexp(t, regexp.MustCompile(`(?m)^a:x1 +completed +1 +expires \S+ \(in [0-9dhms]+\) +1 byte +-$`), r.out)
		assert.Empty(t, r.err, "no progress bar when stderr is not a terminal")

		r = run(t, with(flags, "scan", "--namespace", "nothing")...)
		require.Equal(t, 0, r.code, r.err)
		assert.Empty(t, r.out)
		assert.Equal(t, "no records\n", r.err)
	})

	t.Run("bad flags", func(t *testing.T) {
		assert.Equal(t, ExitUsage, run(t, with(flags, "scan", "--state", "done")...).code)
		assert.Equal(t, ExitUsage, run(t, with(flags, "scan", "--limit", "-1")...).code)
		assert.Equal(t, ExitUsage, run(t, with(flags, "scan", "extra")...).code)
	})
}
