package cli

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testGet: get shows each record as the store holds it, in a table and
// in JSON, with the result decoded when it is JSON and as bytes with
// --raw; an unknown key is not found (exit 3), never an empty record.
func testGet(t *testing.T, b backend) {
	s, flags := b.fresh(t)
	start := time.Now()
	completed(t, s, "orders:42", []byte(`{"charged":4200,"currency":"EUR"}`), "gateway timeout")
	completed(t, s, "orders:bin", []byte("\x00\x01not json"))
	failed(t, s, "orders:43", "boom 1", "boom 2", "boom 3")
	live := claim(t, s, "orders:44", time.Hour, "sha256:abc")

	t.Run("table", func(t *testing.T) {
		r := run(t, with(flags, "get", "orders:42")...)
		require.Equal(t, 0, r.code, r.err)
		for _, line := range []string{
			`key +orders:42`, `state +completed`, `attempt +2`, `lease until +-`,
			`expires +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(in \d+[hm]`, `last error +gateway timeout`,
			`fingerprint +-`, `result size +33 bytes`, `result +\{`, ` +"charged": 4200,`, ` +"currency": "EUR"`, ` +\}`,
		} {
			assert.Regexp(t, regexp.MustCompile(`(?m)^`+line), r.out)
		}
	})

	t.Run("json", func(t *testing.T) {
		r := run(t, with(flags, "-o", "json", "get", "orders:42", "orders:43", "orders:44", "orders:bin")...)
		require.Equal(t, 0, r.code, r.err)
		recs := lines[recordJSON](t, r.out)
		require.Len(t, recs, 4)

		done := recs[0]
		assert.Equal(t, "orders:42", done.Key)
		assert.Equal(t, "orders", done.Namespace)
		assert.Equal(t, "42", done.ID)
		assert.Equal(t, "completed", done.State)
		assert.Equal(t, 2, done.Attempt)
		assert.Equal(t, "gateway timeout", done.LastError)
		assert.Equal(t, 33, done.ResultSize)
		assert.JSONEq(t, `{"charged":4200,"currency":"EUR"}`, string(done.Result))
		assert.Nil(t, done.ResultBase64)
		assert.Nil(t, done.LeaseUntil)
		require.NotNil(t, done.ExpiresAt)
		assert.True(t, done.ExpiresAt.After(start), "expires_at %v", done.ExpiresAt)

		fail := recs[1]
		assert.Equal(t, "failed", fail.State)
		assert.Equal(t, 3, fail.Attempt)
		assert.Equal(t, "boom 3", fail.LastError)
		assert.Equal(t, 0, fail.ResultSize)
		assert.Nil(t, fail.Result)

		proc := recs[2]
		assert.Equal(t, "processing", proc.State)
		assert.Equal(t, 1, proc.Attempt)
		assert.Equal(t, "sha256:abc", proc.Fingerprint)
		require.NotNil(t, proc.LeaseUntil)
		assert.True(t, proc.LeaseUntil.Equal(live.Record.LeaseUntil), "lease_until %v, the claim's %v", proc.LeaseUntil, live.Record.LeaseUntil)

		bin := recs[3]
		assert.Nil(t, bin.Result)
		assert.Equal(t, []byte("\x00\x01not json"), bin.ResultBase64)

		// The field names are the documented ones.
		var raw map[string]json.RawMessage
		first, _, _ := strings.Cut(r.out, "\n")
		require.NoError(t, json.Unmarshal([]byte(first), &raw))
		for _, f := range []string{"key", "namespace", "id", "state", "attempt", "lease_until", "expires_at", "last_error", "fingerprint", "result_size", "result"} {
			assert.Contains(t, raw, f)
		}
	})

	t.Run("not JSON", func(t *testing.T) {
		r := run(t, with(flags, "get", "orders:bin")...)
		require.Equal(t, 0, r.code, r.err)
		assert.Contains(t, r.out, `"\x00\x01not json" (not JSON; --raw writes the bytes)`)
	})

	t.Run("raw", func(t *testing.T) {
		r := run(t, with(flags, "get", "--raw", "orders:bin")...)
		require.Equal(t, 0, r.code, r.err)
		assert.Equal(t, "\x00\x01not json", r.out)

		r = run(t, with(flags, "get", "--raw", "orders:43")...)
		assert.Equal(t, ExitError, r.code)
		assert.Contains(t, r.err, "orders:43 is failed")

		r = run(t, with(flags, "get", "--raw", "orders:42", "orders:43")...)
		assert.Equal(t, ExitUsage, r.code)
	})

	t.Run("namespace", func(t *testing.T) {
		r := run(t, with(flags, "--namespace", "orders", "-o", "json", "get", "42")...)
		require.Equal(t, 0, r.code, r.err)
		assert.Equal(t, "orders:42", lines[recordJSON](t, r.out)[0].Key)
	})

	t.Run("not found", func(t *testing.T) {
		r := run(t, with(flags, "-o", "json", "get", "orders:42", "orders:nope", "other:42")...)
		assert.Equal(t, ExitNotFound, r.code)
		recs := lines[recordJSON](t, r.out)
		require.Len(t, recs, 1, "the found record is printed, and no empty one")
		assert.Equal(t, "orders:42", recs[0].Key)
		assert.Contains(t, r.err, "not found: orders:nope, other:42")

		r = run(t, with(flags, "get", "orders:nope")...)
		assert.Equal(t, ExitNotFound, r.code)
		assert.Empty(t, r.out)
	})
}
