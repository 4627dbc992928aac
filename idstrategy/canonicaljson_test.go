package idstrategy

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

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
