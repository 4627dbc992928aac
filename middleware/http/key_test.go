package deduphttp_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	deduphttp "github.com/dedup-go/dedup/middleware/http"
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
