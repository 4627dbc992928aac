package deduphttp_test

import (
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	deduphttp "github.com/dedup-go/dedup/middleware/http"
	"github.com/dedup-go/dedup/store"
)

func scoped(principal, op, key string, maxLen int) string {
	return string(deduphttp.AppendScopedID(nil, principal, op, key, maxLen))
}

// FuzzScopedIDInjective: two different (principal, operation, key) never
// share a record id, and an id always fits the receiver's limit and is
// valid UTF-8.
func FuzzScopedIDInjective(f *testing.F) {
	f.Add("a:b", "c", "k", "a", "b:c", "k")
	// Each collides if one of the lengths is left out.
	f.Add("a1", "b", "kkkkkkkkkkK", "a", "bkkkkkkkkkk", "K")
	f.Add("x", "ab", "c", "x", "a", "bc")
	f.Add("1:a", "", "k", "", "1:ak", "")
	f.Add(strings.Repeat("p", 400), "op", "k", "", "", "k")
	f.Add("\xff", "op", "k", "\xfe", "op", "k")
	f.Fuzz(func(t *testing.T, p1, o1, k1, p2, o2, k2 string) {
		if k1 == "" || k2 == "" || len(k1) > deduphttp.MaxKeyLength || len(k2) > deduphttp.MaxKeyLength || !utf8.ValidString(k1) || !utf8.ValidString(k2) {
			return // the middleware refuses these keys before
		}
		const maxLen = 512
		a, b := scoped(p1, o1, k1, maxLen), scoped(p2, o2, k2, maxLen)
		for _, id := range []string{a, b} {
			require.LessOrEqual(t, len(id), maxLen)
			require.True(t, utf8.ValidString(id))
		}
		if p1 != p2 || o1 != o2 || k1 != k2 {
			require.NotEqual(t, a, b, "(%q,%q,%q) and (%q,%q,%q)", p1, o1, k1, p2, o2, k2)
		}
	})
}

func TestScopedIDHashesLongScopes(t *testing.T) {
	t.Parallel()
	key := strings.Repeat("k", deduphttp.MaxKeyLength)
	long := scoped(strings.Repeat("p", 300), "POST /orders", key, 299)
	require.Len(t, long, 299)
	require.True(t, strings.HasPrefix(long, "#"))
	require.Equal(t, "4:acme14:POST /orders/1k1", scoped("acme", "POST /orders/1", "k1", 512))
	// Without Options.Operation, the operation is empty.
	require.Equal(t, "4:acme0:k1", scoped("acme", "", "k1", 512))
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"abc":                    "abc",
		`"abc"`:                  "abc",
		`"a\"b\\c"`:              `a"b\c`,
		`a"b`:                    `a"b`,
		"~ !az{|}":               "~ !az{|}",
		`" spaced key "`:         " spaced key ",
		strings.Repeat("x", 255): strings.Repeat("x", 255),
	} {
		got, err := deduphttp.ParseKey(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got)
	}
	for _, in := range []string{"", `""`, `"`, `"abc`, `"a"b"`, `"a\b"`, `"a\"`, "\"caf\u00e9\"", "caf\u00e9", "a\x00", "a\nb", "\u009f", "\xc3", strings.Repeat("x", 256), `"` + strings.Repeat("x", 256) + `"`} {
		_, err := deduphttp.ParseKey(in)
		require.Error(t, err, "%q", in)
	}
}

// TestRecordIDFindsTheRecord: the id RecordID builds from a request's
// principal, operation and key is the id of the record the middleware
// wrote for it (in the receiver's namespace), with and without
// Options.Operation, quoted or raw, and hashed for a scope too long for
// the receiver's MaxIDLength, at the default and at a MaxIDLength of the
// user's.
func TestRecordIDFindsTheRecord(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("p", 600)
	for _, c := range []struct {
		name, principal, op, header, key string
		maxIDLength                      int
		hashed                           bool
	}{
		{name: "plain", principal: "acme", header: "pay-1", key: "pay-1"},
		{name: "operation", principal: "acme", op: "POST /orders/{id}/pay", header: "pay-1", key: "pay-1"},
		{name: "quoted", principal: "acme", header: `"pay \"2\""`, key: `pay "2"`},
		{name: "shared scope", header: "pay-1", key: "pay-1"},
		{name: "long principal", principal: long, header: "pay-1", key: "pay-1", hashed: true},
		{name: "own MaxIDLength", principal: strings.Repeat("p", 100), header: strings.Repeat("k", 255), key: strings.Repeat("k", 255), maxIDLength: 299, hashed: true},
		{name: "non-UTF-8 principal", principal: "caf\xe9", header: "pay-1", key: "pay-1", hashed: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newMemstore(t)
			opts := &deduphttp.Options{Config: &dedup.Config{Namespace: "orders", MaxIDLength: c.maxIDLength}}
			if c.op != "" {
				opts.Operation = func(r *http.Request) string { return r.Pattern }
			}
			principal := c.principal
			if principal == "" {
				opts.SharedScope = true
			} else {
				opts.Principal = func(*http.Request) string { return principal }
			}
			m, err := deduphttp.New(s, opts)
			require.NoError(t, err)
			mux := http.NewServeMux()
			mux.Handle("POST /orders/{id}/pay", m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusCreated)
			})))
			rep := record(t, mux, req{}, map[string][]string{deduphttp.HeaderKey: {c.header}})
			require.Equal(t, http.StatusCreated, rep.Status, "%s", rep.Body)

			id := deduphttp.RecordID(c.principal, c.op, c.key, c.maxIDLength)
			require.Equal(t, c.hashed, strings.HasPrefix(id, "#"), id)
			require.True(t, strings.HasSuffix(id, c.key), "the key is in the clear: %s", id)
			rec, err := s.Get(t.Context(), "orders:"+id)
			require.NoError(t, err, "the record of %s", id)
			require.Equal(t, store.StateCompleted, rec.State)
			require.Equal(t, 1, records(t, s), "the only record")
		})
	}
	require.Equal(t, "4:acme0:pay-1", deduphttp.RecordID("acme", "", "pay-1", 0))
	require.Equal(t, "4:acme9:POST /paypay-1", deduphttp.RecordID("acme", "POST /pay", "pay-1", 0))
	require.Equal(t, deduphttp.RecordID(long, "", "k", 0), deduphttp.RecordID(long, "", "k", adapter.DefaultMaxIDLength), "0 is the default MaxIDLength")
}
