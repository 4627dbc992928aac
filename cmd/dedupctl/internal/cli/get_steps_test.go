package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
)

// order is the message of the receiver whose step records get shows.
type order struct{ ID string }

type charge struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

// byteCodec keeps a []byte as it is and anything else as JSON, so that a
// step's result may be bytes that are not JSON.
type byteCodec struct{}

func (byteCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.([]byte); ok {
		return b, nil
	}
	return dedup.JSONCodec{}.Marshal(v)
}

func (byteCodec) Unmarshal(data []byte, v any) error {
	if p, ok := v.(*[]byte); ok {
		*p = append([]byte(nil), data...)
		return nil
	}
	return dedup.JSONCodec{}.Unmarshal(data, v)
}

// stepStore is a store that keeps step records, for the tests of get's
// steps.
type stepStore interface {
	seedStore
	store.StepStore
}

// seedSteps runs a receiver with steps and compensations over s and
// leaves the records get shows:
//
//	orders:o1  given up for a Permanent error, its charge compensated:
//	           steps of JSON results (short, long), bytes (short, long,
//	           JSON that is not UTF-8), a result too large to store, and a
//	           record no receiver wrote
//	orders:o2  being given up: the compensation of its charge failed
func seedSteps(t *testing.T, s stepStore) {
	handler := func(ctx context.Context, o order) (string, error) {
		if _, err := dedup.Step(ctx, "charge", func(ctx context.Context) (charge, error) {
			return charge{ID: "ch_" + o.ID, Amount: 4200}, ctx.Err()
		}); err != nil {
			return "", err
		}
		if o.ID == "o1" {
			for name, v := range map[string][]byte{
				"bin":    []byte("\xff\x00bin"),
				"blob":   bytes.Repeat([]byte{0xfe}, 220),
				"huge":   bytes.Repeat([]byte("x"), 300), // over MaxResultSize: not stored
				"latin1": []byte("\"caf\xe9\""),          // JSON, but not UTF-8
			} {
				if _, err := dedup.Step(ctx, name, func(ctx context.Context) ([]byte, error) { return v, ctx.Err() }); err != nil {
					return "", err
				}
			}
			if _, err := dedup.Step(ctx, "note", func(ctx context.Context) (string, error) {
				return strings.Repeat("n", 210), ctx.Err()
			}); err != nil {
				return "", err
			}
		}
		_, err := dedup.Step(ctx, "reserve", func(ctx context.Context) (int, error) {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			return 0, dedup.Permanent(errors.New("out of stock"))
		})
		return "", err
	}
	rcv, err := dedup.NewReceiver(s, func(o order) (string, error) { return o.ID, nil }, handler, &dedup.Config{
		Namespace:     "orders",
		MaxAttempts:   3,
		MaxResultSize: 250,
		Codec:         byteCodec{},
		Compensations: dedup.Compensations{
			"charge": dedup.Compensate(func(ctx context.Context, o order, c charge) error {
				if o.ID == "o2" {
					return errors.New("refund API down")
				}
				return ctx.Err()
			}),
		},
	})
	require.NoError(t, err)
	_, err = rcv.Handle(t.Context(), order{ID: "o1"})
	require.ErrorContains(t, err, "out of stock")
	_, err = rcv.Handle(t.Context(), order{ID: "o2"})
	var ce *dedup.CompensationError
	require.ErrorAs(t, err, &ce)

	// A record of another writer's, under a claim of the test's.
	c := claim(t, s, "orders:o1", time.Minute, "")
	require.NoError(t, s.SaveStep(t.Context(), store.SaveStepRequest{Key: "orders:o1", Token: c.Token, Name: "custom/audit",
		Value: []byte("written by hand"), Retention: retention}))
	require.NoError(t, s.Release(t.Context(), store.ReleaseRequest{Key: "orders:o1", Token: c.Token, Error: "audited", Retention: retention}))

	rec, err := s.Get(t.Context(), "orders:o1")
	require.NoError(t, err)
	require.Len(t, rec.Steps, 8, "charge, bin, blob, huge, latin1, note, the given-up record, custom/audit (reserve failed: no record)")
}

// TestGetSteps: get's steps, over memstore (which the tool does not
// open: its records are printed as get prints them).
func TestGetSteps(t *testing.T) {
	t.Parallel()
	mem, err := memstore.New(nil)
	require.NoError(t, err)
	seedSteps(t, mem)
	print := func(rec store.Record, output string) string {
		var out bytes.Buffer
		o := &options{output: output, streams: Streams{Out: &out}}
		require.NoError(t, o.printRecord(rec, false))
		return out.String()
	}
	checkSteps(t, func(t *testing.T, key, output string) string {
		rec, err := mem.Get(t.Context(), key)
		require.NoError(t, err)
		return print(rec, output)
	})

	// A record without steps shows none.
	rec, err := mem.Get(t.Context(), "orders:o1")
	require.NoError(t, err)
	rec.Steps = nil
	assert.NotContains(t, print(rec, "table"), "step")
	assert.NotContains(t, print(rec, "json"), `"steps"`)
}

// testGetSteps: get's steps, as the command shows them, over a store that
// keeps step records.
func testGetSteps(t *testing.T, b backend) {
	s, flags := b.fresh(t)
	ss, ok := s.(stepStore)
	if !ok || !store.KeepsSteps(s) {
		t.Skipf("the %s store keeps no step records", b.name)
	}
	seedSteps(t, ss)
	checkSteps(t, func(t *testing.T, key, output string) string {
		r := run(t, with(flags, "-o", output, "get", key)...)
		require.Equal(t, 0, r.code, r.err)
		return r.out
	})
}

// checkSteps checks what get (printed: a key's output, table or json)
// shows of the records seedSteps left: a record's step records in the
// order they completed, the given-up record after them and a foreign one
// last: name, state, order, the result as text when it is UTF-8 JSON, in
// base64 when it is short bytes, its length when long; the given-up
// record's reason, cause, failed step and failures; a record no receiver
// wrote, raw with a note.
func checkSteps(t *testing.T, printed func(t *testing.T, key, output string) string) {

	t.Run("table", func(t *testing.T) {
		out := printed(t, "orders:o1", "table")
		// Each step's name, then its fields, in the order the steps ran;
		// the given-up record, then the foreign one, last.
		want := []string{
			`steps +8$`,
			`step +charge$`, `  state +compensated$`, `  order +1$`, `  result +\{"id":"ch_o1","amount":4200\}$`,
			`step +(bin|blob|huge|latin1)$`,
		}
		for _, l := range want {
			assert.Regexp(t, regexp.MustCompile(`(?m)^`+l), out)
		}
		block := func(name string) string {
			t.Helper()
			m := regexp.MustCompile(`(?m)^step +` + regexp.QuoteMeta(name) + `\n((?:  .*\n)*)`).FindStringSubmatch(out)
			require.NotNil(t, m, "no step %s in:\n%s", name, out)
			return m[1]
		}
		assert.Regexp(t, `(?m)^  state +done$`, block("bin"))
		assert.Regexp(t, `(?m)^  result +base64:/wBiaW4= \(5 bytes, not JSON\)$`, block("bin"))
		assert.Regexp(t, `(?m)^  result +220 bytes, not JSON \(-o json has the result in base64\)$`, block("blob"))
		assert.Regexp(t, `(?m)^  state +done-result-not-stored$`, block("huge"))
		assert.Regexp(t, `(?m)^  result +base64:ImNhZuki \(6 bytes, not JSON\)$`, block("latin1"), "JSON that is not UTF-8 is bytes")
		assert.Regexp(t, `(?m)^  result +- \(the step's result could not be stored\)$`, block("huge"))
		assert.Regexp(t, `(?m)^  result +"n{199}… \(212 bytes; -o json has it whole\)$`, block("note"))
		given := block(dedup.GivenUpStep)
		for _, l := range []string{`  state +compensated-all$`, `  reason +permanent-error$`, `  cause +.*out of stock$`, `  failed step +-$`, `  failures +0$`} {
			assert.Regexp(t, regexp.MustCompile(`(?m)^`+l), given)
		}
		assert.NotContains(t, given, "order", "the given-up record has no order")
		foreign := block("custom/audit")
		assert.Regexp(t, `(?m)^  note +not written by a dedup receiver`, foreign)
		assert.Regexp(t, `(?m)^  raw +base64:d3JpdHRlbiBieSBoYW5k \(15 bytes, not JSON\)$`, foreign)

		// The order: completed steps by their order, then the given-up
		// record, then the foreign one.
		var names []string
		for _, m := range regexp.MustCompile(`(?m)^step +(\S+)$`).FindAllStringSubmatch(out, -1) {
			names = append(names, m[1])
		}
		require.Len(t, names, 8)
		assert.Equal(t, "charge", names[0])
		assert.ElementsMatch(t, []string{"bin", "blob", "huge", "latin1"}, names[1:5])
		assert.Equal(t, []string{"note", dedup.GivenUpStep, "custom/audit"}, names[5:])

		comp := printed(t, "orders:o2", "table")
		for _, l := range []string{
			`step +charge$`, `  state +done$`, `  order +1$`,
			`step +dedup/given-up$`, `  state +compensating$`, `  reason +permanent-error$`, `  failed step +charge$`, `  failures +1$`,
		} {
			assert.Regexp(t, regexp.MustCompile(`(?m)^`+l), comp)
		}
	})

	t.Run("json", func(t *testing.T) {
		got := lines[recordJSON](t, printed(t, "orders:o1", "json"))
		require.Len(t, got, 1)
		byName := map[string]stepJSON{}
		var names []string
		for _, s := range got[0].Steps {
			byName[s.Name] = s
			names = append(names, s.Name)
		}
		require.Len(t, names, 8)
		assert.Equal(t, []string{"note", dedup.GivenUpStep, "custom/audit"}, names[5:])

		ch := byName["charge"]
		assert.Equal(t, "compensated", ch.State)
		assert.EqualValues(t, 1, ch.Order)
		assert.JSONEq(t, `{"id":"ch_o1","amount":4200}`, string(ch.Result))
		assert.Nil(t, ch.ResultBase64)
		assert.Equal(t, []byte("\xff\x00bin"), byName["bin"].ResultBase64)
		assert.Nil(t, byName["bin"].Result)
		assert.Equal(t, bytes.Repeat([]byte{0xfe}, 220), byName["blob"].ResultBase64)
		assert.Equal(t, 220, byName["blob"].ResultSize)
		assert.Equal(t, []byte("\"caf\xe9\""), byName["latin1"].ResultBase64, "JSON that is not UTF-8 is bytes")
		assert.Nil(t, byName["latin1"].Result)
		assert.Equal(t, "done-result-not-stored", byName["huge"].State)
		assert.Zero(t, byName["huge"].ResultSize)
		assert.JSONEq(t, `"`+strings.Repeat("n", 210)+`"`, string(byName["note"].Result), "whole in JSON")

		g := byName[dedup.GivenUpStep]
		assert.Equal(t, "compensated-all", g.State)
		assert.Equal(t, "permanent-error", g.Reason)
		assert.Contains(t, g.Cause, "out of stock")
		assert.Zero(t, g.Order)
		f := byName["custom/audit"]
		assert.Equal(t, []byte("written by hand"), f.RawBase64)
		assert.Contains(t, f.Note, "not written by a dedup receiver")
		assert.Empty(t, f.State)

		// The documented field names.
		var raw struct {
			Steps []map[string]json.RawMessage `json:"steps"`
		}
		require.NoError(t, json.Unmarshal([]byte(printed(t, "orders:o2", "json")), &raw))
		require.Len(t, raw.Steps, 2)
		for _, f := range []string{"name", "state", "order", "result_size", "result"} {
			assert.Contains(t, raw.Steps[0], f)
		}
		for _, f := range []string{"name", "state", "reason", "cause", "failed_step", "failures"} {
			assert.Contains(t, raw.Steps[1], f)
		}
		assert.Equal(t, `"charge"`, string(raw.Steps[1]["failed_step"]))
	})
}
