package idstrategy

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// Internal tests: the canonical text itself, before hashing.

func TestCanonicalForm(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{` { "b" : [ 3 , { "z" : null , "y" : true } ] , "a" : false } `, `{"a":false,"b":[3,{"y":true,"z":null}]}`},
		{`{"a":1,"a!":2,"a\"":3}`, `{"a":1,"a!":2,"a\"":3}`},
		{`["\u00e9\u00E9é"]`, `["ééé"]`},
		{`["\ud83d\ude00"]`, `["😀"]`},
		{`["\/\b\f\n\r\t\"\\"]`, `["/\b\f\n\r\t\"\\"]`},
		{`["\u0000\u001f\u007f\u2028"]`, "[\"\\u0000\\u001f\x7f\u2028\"]"},
		{`[-0, 0.50, 1E+2, 1e-2, 12345678901234567890123]`, `[-0,0.50,1E+2,1e-2,12345678901234567890123]`},
		{`"only a string"`, `"only a string"`},
		{`  7 `, `7`},
		{`{}`, `{}`},
		{`[[],{},[{}]]`, `[[],{},[{}]]`},
	}
	for _, tt := range tests {
		c := new(canonicalizer)
		got, err := c.canonicalize([]byte(tt.in))
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, string(got), tt.in)
	}
}

// Keys sort as RFC 8785 sorts them, by UTF-16 code units, which differs from
// the order of their UTF-8 bytes and from that of their escaped text.
func TestCanonicalKeyOrder(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		// UTF-8 puts U+FB01 (EF AC 81) before U+1F600 (F0 9F 98 80); UTF-16
		// puts U+1F600 (D83D DE00) before U+FB01.
		{"above U+FFFF before U+E000-U+FFFF", `{"\uFB01":1,"\uD83D\uDE00":2}`, "{\"\U0001F600\":2,\"\uFB01\":1}"},
		{"the same, written raw", "{\"\U0001F600\":2,\"\uFB01\":1}", "{\"\U0001F600\":2,\"\uFB01\":1}"},
		{"U+FFFF after U+10000", `{"\uffff":1,"\ud800\udc00":2}`, "{\"\U00010000\":2,\"\uffff\":1}"},
		{"below U+D800 before above U+FFFF", `{"\ud83d\ude00":1,"\ud7ff":2}`, "{\"\ud7ff\":2,\"\U0001F600\":1}"},
		{"above U+FFFF in code point order", `{"\ud83d\ude00":1,"\ud800\udc00":2}`, "{\"\U00010000\":2,\"\U0001F600\":1}"},
		// Escaped characters sort by what they are, not by their backslash.
		{"carriage return before a digit", `{"1":1,"\r":2}`, `{"\r":2,"1":1}`},
		{"quote before hash", `{"a#":1,"a\"":2}`, `{"a\"":2,"a#":1}`},
		{"backslash before bracket", `{"a]":1,"a\\":2}`, `{"a\\":2,"a]":1}`},
		{"U+0001 before newline", `{"\n":1,"\u0001":2}`, `{"\u0001":2,"\n":1}`},
		{"U+001F before space", `{"a ":1,"a\u001F":2}`, `{"a\u001f":2,"a ":1}`},
		{"tab before U+000B", `{"\u000b":1,"\t":2}`, `{"\t":2,"\u000b":1}`},
		{"a prefix first", `{"ab":1,"a":2,"":3}`, `{"":3,"a":2,"ab":1}`},
		{"common prefix, then U+00E9 before U+00EA", `{"xy\u00ea":1,"xy\u00e9":2}`, `{"xyé":2,"xyê":1}`},
		// RFC 8785 section 3.2.3.
		{"RFC 8785 sorting example", `{
			"\u20ac": "Euro Sign",
			"\r": "Carriage Return",
			"\ufb33": "Hebrew Letter Dalet With Dagesh",
			"1": "One",
			"\ud83d\ude00": "Emoji: Grinning Face",
			"\u0080": "Control",
			"\u00f6": "Latin Small Letter O With Diaeresis"
		}`, `{"\r":"Carriage Return","1":"One","` + "\u0080" + `":"Control","ö":"Latin Small Letter O With Diaeresis",` +
			`"€":"Euro Sign","😀":"Emoji: Grinning Face","` + "\ufb33" + `":"Hebrew Letter Dalet With Dagesh"}`},
		// weird.json of the JCS reference implementation's test data
		// (github.com/cyberphone/json-canonicalization).
		{"JCS test data weird.json", `{
			"\u20ac": "Euro Sign",
			"1": "One",
			"\u0080": "Control\u007f",
			"\ud83d\ude02": "Smiley",
			"\u00f6": "Latin Small Letter O With Diaeresis",
			"\ufb33": "Hebrew Letter Dalet With Dagesh",
			"</script>": "Browser Challenge"
		}`, `{"1":"One","</script>":"Browser Challenge","` + "\u0080\":\"Control\u007f" + `","ö":"Latin Small Letter O With Diaeresis",` +
			`"€":"Euro Sign","😂":"Smiley","` + "\ufb33" + `":"Hebrew Letter Dalet With Dagesh"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := new(canonicalizer).canonicalize([]byte(tt.in))
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))
		})
	}
}

// FuzzKeyOrder checks compareKeys against the definition: the UTF-16 code
// units of the decoded keys, compared one by one.
func FuzzKeyOrder(f *testing.F) {
	for _, seed := range [][2]string{
		{"\uFB01", "\U0001F600"}, {"\r", "1"}, {"a\"", "a#"}, {"\x01", "\n"}, {"ab", "a"},
		{"\U00010000", "\uffff"}, {"x\\", "x]"}, {"same", "same"}, {"", "\x00"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if !utf8.ValidString(a) || !utf8.ValidString(b) {
			t.Skip("keys are valid UTF-8: the parser refuses the rest")
		}
		// encoding/json escapes <, > and & too, and the parser decodes them.
		doc, err := json.Marshal([]string{a, b})
		require.NoError(t, err)
		c := new(canonicalizer)
		_, err = c.canonicalize(doc)
		require.NoError(t, err)
		// The two strings are the first two nodes, in document order.
		ka := member{keyFrom: c.nodes[0].from, keyTo: c.nodes[0].to}
		kb := member{keyFrom: c.nodes[1].from, keyTo: c.nodes[1].to}
		want := slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
		if got := c.compareKeys(ka, kb); got != want {
			t.Fatalf("compareKeys(%q, %q) = %d, want %d", a, b, got, want)
		}
		if got := c.compareKeys(kb, ka); got != -want {
			t.Fatalf("compareKeys(%q, %q) = %d, want %d", b, a, got, -want)
		}
	})
}

func TestCanonicalizerIsReusable(t *testing.T) {
	t.Parallel()
	c := new(canonicalizer)
	_, err := c.canonicalize([]byte(`{"a":{"b":[1,2,{"c":3}]},"x":"y"}`))
	require.NoError(t, err)
	_, err = c.canonicalize([]byte(`{"a":{"b":`))
	require.Error(t, err)
	got, err := c.canonicalize([]byte(`{"z":[{"k":2,"j":1}],"y":0}`))
	require.NoError(t, err)
	require.Equal(t, `{"y":0,"z":[{"j":1,"k":2}]}`, string(got))
}

// FuzzCanonicalize checks the parser against encoding/json: it accepts only
// what encoding/json accepts, refuses only for the documented reasons, keeps
// the meaning of the document, and its output is its own canonical form.
func FuzzCanonicalize(f *testing.F) {
	for _, seed := range []string{
		`{"b":1,"a":[true,false,null,"s",-1.5e+3]}`,
		`{"a":{"b":{"c":{}}},"d":[[],[[]]]}`,
		`"\u00e9\ud83d\ude00\n"`,
		`{"a":1,"a":2}`,
		`["\ud800"]`,
		"[\"\xff\"]",
		`{"a" : 1 , "b" :[ 1 , 2 ]}`,
		`[01]`, `{"a":1,}`, `[1.]`, ` `, `nul`, `[1e5,-0,0.0]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c := new(canonicalizer)
		out, err := c.canonicalize(data)
		valid := json.Valid(data)
		if err != nil {
			if !valid {
				return
			}
			msg := err.Error()
			for _, reason := range []string{"duplicate key", "lone surrogate", "invalid UTF-8", "nested more than"} {
				if strings.Contains(msg, reason) {
					return
				}
			}
			t.Fatalf("refused valid JSON %q: %v", data, err)
		}
		if !valid {
			t.Fatalf("accepted invalid JSON %q as %q", data, out)
		}
		out = bytes.Clone(out)
		if !json.Valid(out) {
			t.Fatalf("%q: canonical form %q is not JSON", data, out)
		}
		again, err := new(canonicalizer).canonicalize(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("%q: canonical form %q is not canonical: %q, %v", data, out, again, err)
		}
		if a, b := decode(t, data), decode(t, out); !reflect.DeepEqual(a, b) {
			t.Fatalf("%q means %#v, canonical form %q means %#v", data, a, out, b)
		}
	})
}

func decode(t *testing.T, data []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("encoding/json cannot decode %q: %v", data, err)
	}
	return v
}
