package cli

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
)

// requireTime requires the time a JSON field holds to be want, the one the
// store holds (set).
func requireTime(t *testing.T, want time.Time, got *time.Time, what string) {
	t.Helper()
	require.False(t, want.IsZero(), "%s: the store keeps no time to show", what)
	require.NotNil(t, got, "%s is missing", what)
	require.True(t, want.Equal(*got), "%s is %v, the store holds %v", what, *got, want)
}

// testGet: get shows each record as the store holds it, in a table and
// in JSON (the last claim's token, when it was created and completed or
// failed), with the result decoded when it is JSON and as bytes with
// --raw; an unknown key is not found (exit 3), never an empty record.
func testGet(t *testing.T, b backend) {
	s, flags := b.fresh(t)
	start := time.Now()
	doneBy := completed(t, s, "orders:42", []byte(`{"charged":4200,"currency":"EUR"}`), "gateway timeout")
	completed(t, s, "orders:bin", []byte("\x00\x01not json"))
	failedBy := failed(t, s, "orders:43", "boom 1", "boom 2", "boom 3")
	live := claim(t, s, "orders:44", time.Hour, "sha256:abc")
	// What the store holds, which get must show: the store's own
	// correctness is storetest's to pin.
	held := map[string]store.Record{}
	for _, key := range []string{"orders:42", "orders:43", "orders:44"} {
		rec, err := s.Get(t.Context(), key)
		require.NoError(t, err)
		require.False(t, rec.CreatedAt.IsZero(), "%s: the store keeps no CreatedAt", key)
		held[key] = rec
	}
	stamp := func(at time.Time) string { return regexp.QuoteMeta(at.UTC().Format(time.RFC3339)) }

	t.Run("table", func(t *testing.T) {
		r := run(t, with(flags, "get", "orders:42")...)
		require.Equal(t, 0, r.code, r.err)
		done := held["orders:42"]
		require.False(t, done.CompletedAt.IsZero(), "the store keeps no CompletedAt")
		for _, line := range []string{
			`key +orders:42`, `state +completed`, `attempt +2`, `token +` + doneBy.String() + `$`, `lease until +-`,
			`created +` + stamp(done.CreatedAt) + ` \(\d+[dhms]\S* ago\)$`, `completed +` + stamp(done.CompletedAt) + ` \(\d+[dhms]\S* ago\)$`,
			`expires +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(in \d+[hm]`, `last error +gateway timeout`,
			`fingerprint +-`, `result size +33 bytes`, `result +\{`, ` +"charged": 4200,`, ` +"currency": "EUR"`, ` +\}`,
		} {
			assert.Regexp(t, regexp.MustCompile(`(?m)^`+line), r.out)
		}
		// The lines in the order the issue lists the fields.
		var fields []string
		for _, l := range strings.Split(r.out, "\n") {
			if f, _, ok := strings.Cut(l, "  "); ok && f != "" {
				fields = append(fields, f)
			}
		}
		assert.Equal(t, []string{"key", "state", "attempt", "token", "lease until", "created", "completed", "expires",
			"last error", "fingerprint", "result size", "result"}, fields)

		r = run(t, with(flags, "get", "orders:44")...)
		require.Equal(t, 0, r.code, r.err)
		for _, line := range []string{
			`state +processing`, `token +` + live.Token.String() + `$`, `created +` + stamp(held["orders:44"].CreatedAt) + ` \(`,
			`completed +-$`, `expires +-$`,
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
		assert.Equal(t, doneBy.String(), done.Token, "the token that completed the record")
		requireTime(t, held["orders:42"].CreatedAt, done.CreatedAt, "created_at of the completed record")
		requireTime(t, held["orders:42"].CompletedAt, done.CompletedAt, "completed_at of the completed record")
		assert.False(t, done.CompletedAt.Before(*done.CreatedAt), "completed_at %v before created_at %v", done.CompletedAt, done.CreatedAt)

		fail := recs[1]
		assert.Equal(t, "failed", fail.State)
		assert.Equal(t, 3, fail.Attempt)
		assert.Equal(t, "boom 3", fail.LastError)
		assert.Equal(t, 0, fail.ResultSize)
		assert.Nil(t, fail.Result)
		assert.Equal(t, failedBy.String(), fail.Token, "the token of the last failed attempt")
		requireTime(t, held["orders:43"].CreatedAt, fail.CreatedAt, "created_at of the failed record")
		requireTime(t, held["orders:43"].CompletedAt, fail.CompletedAt, "completed_at of the failed record")

		proc := recs[2]
		assert.Equal(t, "processing", proc.State)
		assert.Equal(t, 1, proc.Attempt)
		assert.Equal(t, "sha256:abc", proc.Fingerprint)
		require.NotNil(t, proc.LeaseUntil)
		assert.True(t, proc.LeaseUntil.Equal(live.Record.LeaseUntil), "lease_until %v, the claim's %v", proc.LeaseUntil, live.Record.LeaseUntil)
		assert.Equal(t, live.Token.String(), proc.Token, "the holder's token")
		requireTime(t, held["orders:44"].CreatedAt, proc.CreatedAt, "created_at of the claim")
		assert.Nil(t, proc.CompletedAt, "a processing record has no completed_at")

		bin := recs[3]
		assert.Nil(t, bin.Result)
		assert.Equal(t, []byte("\x00\x01not json"), bin.ResultBase64)

		// The field names are the documented ones.
		var raw map[string]json.RawMessage
		first, _, _ := strings.Cut(r.out, "\n")
		require.NoError(t, json.Unmarshal([]byte(first), &raw))
		for _, f := range []string{"key", "namespace", "id", "state", "attempt", "lease_until", "expires_at", "last_error", "fingerprint", "result_size", "result",
			"token", "created_at", "completed_at"} {
			assert.Contains(t, raw, f)
		}
		assert.Regexp(t, `^[0-9a-f]{32}$`, done.Token)
		// A time the record does not have is left out, not null.
		raw = nil
		require.NoError(t, json.Unmarshal([]byte(strings.Split(r.out, "\n")[2]), &raw))
		assert.Equal(t, `"processing"`, string(raw["state"]))
		assert.NotContains(t, raw, "completed_at")
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
