package cli

import (
	"bytes"
	"context"
	"io"
	"iter"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
)

// testForget: forget KEY deletes completed and failed records and
// processing ones whose lease has ended, and never one under a live
// lease (held: exit 1, or 0 with --skip-held); an unknown key is not
// found (exit 3) while the others are forgotten.
func testForget(t *testing.T, b backend) {
	s, flags := b.fresh(t)
	completed(t, s, "o:done", []byte(`1`))
	failed(t, s, "o:failed", "boom")
	stuck(t, s, "o:stuck")
	live := claim(t, s, "o:live", time.Hour, "")

	t.Run("dry run", func(t *testing.T) {
		r := run(t, with(flags, "-o", "json", "forget", "--dry-run", "o:done", "o:failed", "o:stuck", "o:live")...)
		assert.Equal(t, ExitError, r.code, "a held key would stay: %s", r.err)
		outcomes := map[string]string{}
		for _, v := range lines[forgetJSON](t, r.out) {
			outcomes[v.Key] = v.Outcome
		}
		assert.Equal(t, map[string]string{"o:done": "would_forget", "o:failed": "would_forget", "o:stuck": "would_forget", "o:live": "held"}, outcomes)
		for _, k := range []string{"o:done", "o:failed", "o:stuck", "o:live"} {
			assert.True(t, exists(t, s, k), "a dry run forgets nothing: %s", k)
		}
	})

	t.Run("held", func(t *testing.T) {
		r := run(t, with(flags, "forget", "o:live")...)
		assert.Equal(t, ExitError, r.code)
		assert.Regexp(t, regexp.MustCompile(`(?m)^o:live +processing +1 +held by a live claim until \S+ \(in [0-9hms]+\)$`), r.out)
		assert.Contains(t, r.err, "1 held by a live claim, not forgotten")
		assert.True(t, exists(t, s, "o:live"), "a live claim is never forgotten")

		r = run(t, with(flags, "forget", "--skip-held", "o:live")...)
		assert.Equal(t, 0, r.code, r.err)
		assert.True(t, exists(t, s, "o:live"))
		// Its holder still completes it: the claim was not disturbed.
		require.NoError(t, s.Extend(t.Context(), store.ExtendRequest{Key: "o:live", Token: live.Token, Lease: time.Hour}))
	})

	t.Run("forgotten", func(t *testing.T) {
		r := run(t, with(flags, "-o", "json", "forget", "o:done", "o:failed", "o:stuck", "o:nope", "o:live", "--skip-held")...)
		assert.Equal(t, ExitNotFound, r.code, r.err)
		assert.Contains(t, r.err, "not found: o:nope")
		assert.Contains(t, r.err, "forgot 3; 1 held by a live claim; 1 not found")
		got := lines[forgetJSON](t, r.out)
		require.Len(t, got, 5)
		for i, want := range []struct{ key, state, outcome string }{
			{"o:done", "completed", "forgotten"},
			{"o:failed", "failed", "forgotten"},
			{"o:stuck", "processing", "forgotten"},
			{"o:nope", "", "not_found"},
			{"o:live", "processing", "held"},
		} {
			assert.Equal(t, want.key, got[i].Key)
			assert.Equal(t, want.state, got[i].State, want.key)
			assert.Equal(t, want.outcome, got[i].Outcome, want.key)
		}
		for _, k := range []string{"o:done", "o:failed", "o:stuck"} {
			assert.False(t, exists(t, s, k), "forgotten: %s", k)
		}
		assert.True(t, exists(t, s, "o:live"))

		// Forgotten, the key is claimed afresh: attempt 1.
		assert.Equal(t, 1, claim(t, s, "o:failed", time.Minute, "").Record.Attempt)

		// A held key and a missing one: held wins (exit 1).
		assert.Equal(t, ExitError, run(t, with(flags, "forget", "o:live", "o:nope")...).code)
	})

	t.Run("usage", func(t *testing.T) {
		for _, args := range [][]string{
			{"forget"},
			{"forget", ""},
			{"forget", "o:"},
			{"forget", ":x"},
			{"forget", "x"},
			{"forget", "o:done", "--state", "failed"},
		} {
			r := run(t, with(flags, args...)...)
			assert.Equal(t, ExitUsage, r.code, "%q: %s", args, r.err)
		}
	})
}

// testForgetBulk: forget --namespace N --state S deletes the records of N
// in S only, after a confirmation on a terminal (refused without one
// unless --yes), and lists them with --dry-run.
func testForgetBulk(t *testing.T, b backend) {
	s, flags := b.fresh(t)
	seed := func() {
		for _, k := range []string{"a:f1", "a:f2", "a:g1", "b:f1"} {
			if !exists(t, s, k) {
				failed(t, s, k, "boom")
			}
		}
		for _, k := range []string{"a:c1", "b:c1"} {
			if !exists(t, s, k) {
				completed(t, s, k, nil)
			}
		}
	}
	seed()
	claim(t, s, "a:p1", time.Hour, "")
	stuck(t, s, "a:p2")
	left := func() []string {
		var ks []string
		for _, k := range []string{"a:f1", "a:f2", "a:g1", "a:c1", "a:p1", "a:p2", "b:f1", "b:c1"} {
			if exists(t, s, k) {
				ks = append(ks, k)
			}
		}
		return ks
	}
	all := []string{"a:f1", "a:f2", "a:g1", "a:c1", "a:p1", "a:p2", "b:f1", "b:c1"}

	t.Run("refused", func(t *testing.T) {
		for _, args := range [][]string{
			{"forget", "--namespace", "a", "--state", "failed"}, // stdin is not a terminal
			{"forget", "--namespace", "a", "--state", "processing", "--yes"},
			{"forget", "--namespace", "a", "--state", "failed,processing", "--yes"},
			{"forget", "--state", "failed", "--yes"},
			{"forget", "--namespace", "a", "--id-prefix", "f", "--yes"},
		} {
			r := run(t, with(flags, args...)...)
			assert.Equal(t, ExitUsage, r.code, "%q: %s", args, r.err)
		}
		assert.Equal(t, all, left())
	})

	t.Run("dry run", func(t *testing.T) {
		r := run(t, with(flags, "forget", "--namespace", "a", "--state", "failed", "--dry-run")...)
		require.Equal(t, 0, r.code, r.err)
		assert.Regexp(t, `^KEY +STATE +ATTEMPT +OUTCOME\n`, r.out)
		for _, k := range []string{"a:f1", "a:f2", "a:g1"} {
			assert.Regexp(t, regexp.MustCompile(`(?m)^`+k+` +failed +1 +would forget$`), r.out)
		}
		assert.NotContains(t, r.out, "a:c1")
		assert.Contains(t, r.err, "would forget 3;")
		assert.Equal(t, all, left())
	})

	t.Run("not confirmed", func(t *testing.T) {
		r := runIn(t, "n\n", true, with(flags, "forget", "--namespace", "a", "--state", "failed")...)
		assert.Equal(t, ExitError, r.code)
		assert.Contains(t, r.err, `Forget 3 failed records of namespace "a"? A redelivery of each will run its handler again. [y/N] `)
		assert.Contains(t, r.err, "not confirmed: nothing forgotten")
		assert.Equal(t, all, left())
	})

	t.Run("confirmed", func(t *testing.T) {
		r := runIn(t, "y\n", true, with(flags, "forget", "--namespace", "a", "--state", "failed", "--id-prefix", "f")...)
		require.Equal(t, 0, r.code, r.err)
		assert.Contains(t, r.err, `Forget 2 failed records of namespace "a" whose id starts with "f"?`)
		assert.Contains(t, r.err, "forgot 2; 0 held by a live claim; 0 not found")
		assert.Equal(t, []string{"a:g1", "a:c1", "a:p1", "a:p2", "b:f1", "b:c1"}, left())
		seed()
	})

	t.Run("yes", func(t *testing.T) {
		r := run(t, with(flags, "-o", "json", "forget", "--namespace", "a", "--state", "failed", "--state", "completed", "--yes")...)
		require.Equal(t, 0, r.code, r.err)
		got := lines[forgetJSON](t, r.out)
		require.Len(t, got, 4)
		for _, v := range got {
			assert.Equal(t, "forgotten", v.Outcome, v.Key)
		}
		// Processing records stay, even the one whose lease ended (a bulk
		// forget takes only the states it names), and so does namespace b.
		assert.Equal(t, []string{"a:p1", "a:p2", "b:f1", "b:c1"}, left())

		r = run(t, with(flags, "forget", "--namespace", "a", "--state", "failed")...)
		assert.Equal(t, ExitUsage, r.code, "asks before it looks: %s", r.err)
		r = runIn(t, "", true, with(flags, "forget", "--namespace", "a", "--state", "failed")...)
		assert.Equal(t, 0, r.code, "nothing to forget, nothing asked: %s", r.err)
		assert.NotContains(t, r.err, "[y/N]")
	})
}

// raceInspector is a store whose Scan lets the test change each record
// after the scan read it and before the command deletes it.
type raceInspector struct {
	store.Inspector
	meanwhile func(store.Record)
}

func (r raceInspector) Scan(ctx context.Context, prefix string) iter.Seq2[store.Record, error] {
	return func(yield func(store.Record, error) bool) {
		for rec, err := range r.Inspector.Scan(ctx, prefix) {
			if err == nil {
				r.meanwhile(rec)
			}
			if !yield(rec, err) {
				return
			}
		}
	}
}

// TestForgetBulkRace: a record a bulk forget read as failed but that
// changed before its delete is not deleted: claimed meanwhile, it is
// reported held (a delivery is running it); completed meanwhile, it is
// left alone and not reported.
func TestForgetBulkRace(t *testing.T) {
	t.Parallel()
	s, _ := singleBackend(t).fresh(t)
	failed(t, s, "r:claimed", "boom")
	failed(t, s, "r:completed", "boom")
	failed(t, s, "r:failed", "boom")
	ins := raceInspector{Inspector: s, meanwhile: func(rec store.Record) {
		switch rec.Key {
		case "r:claimed":
			claim(t, s, rec.Key, time.Hour, "")
		case "r:completed":
			completed(t, s, rec.Key, nil)
		}
	}}
	var out bytes.Buffer
	o := &options{output: "json", streams: Streams{Out: &out, Err: io.Discard}}
	var tally forgetTally
	sel := selection{namespace: "r", states: []store.State{store.StateFailed}}
	require.NoError(t, o.forgetBulk(t.Context(), ins, "test", sel, &forgetFlags{yes: true}, o.newPrinter(&out), &tally))

	outcomes := map[string]string{}
	for _, v := range lines[forgetJSON](t, out.String()) {
		outcomes[v.Key] = v.Outcome
	}
	assert.Equal(t, map[string]string{"r:claimed": "held", "r:failed": "forgotten"}, outcomes)
	assert.Equal(t, forgetTally{forgotten: 1, held: 1}, tally)
	assert.True(t, exists(t, s, "r:claimed"))
	assert.True(t, exists(t, s, "r:completed"))
	assert.False(t, exists(t, s, "r:failed"))
}
