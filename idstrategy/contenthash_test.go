package idstrategy_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/idstrategy"
)

func TestContentHash(t *testing.T) {
	t.Parallel()
	key := idstrategy.ContentHash(orderBody)

	id, err := key(order{Body: []byte("hello")})
	// sha256("hello"), from any other implementation.
	wantID(t, id, err, "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824")

	other, err := key(order{Body: []byte("hello ")})
	require.NoError(t, err)
	require.NotEqual(t, id, other)

	id, err = key(order{Body: []byte(megabyte)})
	sum := sha256.Sum256([]byte(megabyte))
	wantID(t, id, err, "sha256:"+hex.EncodeToString(sum[:]))

	id, err = key(order{Body: nil})
	wantErr(t, id, err, dedup.ErrNoKey, "idstrategy: content hash: dedup: message has no id: the body is empty")
	id, err = key(order{Body: []byte{}})
	wantErr(t, id, err, dedup.ErrNoKey, "the body is empty")

	// Bytes are bytes: a body need not be text.
	id, err = key(order{Body: []byte{0xff, 0x00}})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(id, "sha256:"), id)
}

func TestBodyErrors(t *testing.T) {
	t.Parallel()
	decodeErr := errors.New("cannot decode")
	for name, strategy := range map[string]func(func(order) ([]byte, error)) dedup.KeyFunc[order]{
		"content hash":   idstrategy.ContentHash[order],
		"canonical JSON": idstrategy.CanonicalJSON[order],
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			key := strategy(func(order) ([]byte, error) { return nil, decodeErr })
			id, err := key(order{})
			wantErr(t, id, err, dedup.ErrInvalidKey, "idstrategy: "+name+", reading the body", "cannot decode")
			require.ErrorIs(t, err, decodeErr)

			// A body func that knows there is nothing keeps its ErrNoKey.
			key = strategy(func(order) ([]byte, error) { return nil, dedup.ErrNoKey })
			id, err = key(order{})
			wantErr(t, id, err, dedup.ErrNoKey)
		})
	}
}

func TestCanonicalJSONSameDocument(t *testing.T) {
	t.Parallel()
	key := idstrategy.CanonicalJSON(orderBody)
	tests := []struct {
		name string
		a, b string
	}{
		{"reordered fields", `{"a":1,"b":"x"}`, `{"b":"x","a":1}`},
		{"whitespace", `{"a":1,"b":[1,2]}`, " \n\t{ \"a\" :\r1 , \"b\" : [ 1 ,2 ] }\n"},
		{"nested objects", `{"o":{"x":1,"y":{"p":true,"q":null}}}`, `{"o":{"y":{"q":null,"p":true},"x":1}}`},
		{"objects in arrays", `[{"a":1,"b":2},{"c":3,"d":4}]`, `[{"b":2,"a":1},{"d":4,"c":3}]`},
		{"unicode escapes", `{"k":"é"}`, `{"k":"\u00e9"}`},
		{"escape case", `{"k":"\u00E9"}`, `{"k":"\u00e9"}`},
		{"escaped keys", `{"a":1,"b":2}`, `{"\u0062":2,"\u0061":1}`},
		{"surrogate pair", `{"k":"😀"}`, `{"k":"\ud83d\ude00"}`},
		{"solidus", `{"k":"a/b"}`, `{"k":"a\/b"}`},
		{"short escapes", `{"k":"\n\t\"\\"}`, `{"k":"\u000a\u0009\u0022\u005c"}`},
		{"control escapes", `{"k":"\u001f"}`, `{"k":"\u001F"}`},
		{"html escapes of encoding/json", `{"k":"<&>"}`, `{"k":"\u003c\u0026\u003e"}`},
		{"empty containers", `{"a":{},"b":[]}`, `{ "b" : [ ] , "a" : { } }`},
		{"scalar document", `"x"`, ` "\u0078" `},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, err := key(order{Body: []byte(tt.a)})
			require.NoError(t, err)
			b, err := key(order{Body: []byte(tt.b)})
			wantID(t, b, err, a)
			require.True(t, strings.HasPrefix(a, "json-sha256:"), a)
		})
	}
}

func TestCanonicalJSONDifferentDocuments(t *testing.T) {
	t.Parallel()
	key := idstrategy.CanonicalJSON(orderBody)
	tests := []struct {
		name string
		a, b string
	}{
		{"value", `{"a":1}`, `{"a":2}`},
		{"key", `{"a":1}`, `{"b":1}`},
		{"number as written", `{"a":1}`, `{"a":1.0}`},
		{"exponent as written", `{"a":1e2}`, `{"a":100}`},
		{"number or string", `{"a":1}`, `{"a":"1"}`},
		{"null or string", `null`, `"null"`},
		{"array order", `[1,2]`, `[2,1]`},
		{"nested value", `{"o":{"x":1}}`, `{"o":{"x":2}}`},
		{"nesting", `{"a":{"b":1}}`, `{"a":[{"b":1}]}`},
		{"key boundary", `{"ab":"c"}`, `{"a":"bc"}`},
		{"member boundary", `{"a":"b\",\"c\":\"d"}`, `{"a":"b","c":"d"}`},
		{"empty object or array", `{}`, `[]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, errA := key(order{Body: []byte(tt.a)})
			b, errB := key(order{Body: []byte(tt.b)})
			require.NoError(t, errA)
			require.NoError(t, errB)
			require.NotEqual(t, a, b)
		})
	}
}

func TestCanonicalJSONRejects(t *testing.T) {
	t.Parallel()
	key := idstrategy.CanonicalJSON(orderBody)
	tests := []struct {
		name   string
		body   string
		target error
		msg    string
	}{
		{"empty body", "", dedup.ErrNoKey, "idstrategy: canonical JSON: dedup: message has no id: the body is empty"},
		{"only whitespace", " \n", dedup.ErrInvalidKey, "at byte 2: unexpected end of the document"},
		{"truncated object", `{"a":1`, dedup.ErrInvalidKey, "expecting ',' or '}'"},
		{"truncated string", `{"a":"x`, dedup.ErrInvalidKey, "end of the document in a string"},
		{"trailing comma", `{"a":1,}`, dedup.ErrInvalidKey, "expecting a key"},
		{"trailing garbage", `{"a":1} x`, dedup.ErrInvalidKey, "after the document"},
		{"two documents", `{} {}`, dedup.ErrInvalidKey, "after the document"},
		{"single quotes", `{'a':1}`, dedup.ErrInvalidKey, "expecting a key"},
		{"unquoted key", `{a:1}`, dedup.ErrInvalidKey, "expecting a key"},
		{"missing colon", `{"a" 1}`, dedup.ErrInvalidKey, "expecting ':'"},
		{"leading zero", `[01]`, dedup.ErrInvalidKey, "expecting ',' or ']'"},
		{"bare minus", `[-]`, dedup.ErrInvalidKey, "invalid number"},
		{"dot without digits", `[1.]`, dedup.ErrInvalidKey, "after '.'"},
		{"empty exponent", `[1e]`, dedup.ErrInvalidKey, "exponent"},
		{"plus sign", `[+1]`, dedup.ErrInvalidKey, "expecting a value"},
		{"NaN", `[NaN]`, dedup.ErrInvalidKey, "expecting a value"},
		{"bad literal", `[tru]`, dedup.ErrInvalidKey, "expecting true"},
		{"raw control character", "[\"a\nb\"]", dedup.ErrInvalidKey, "control character"},
		{"bad escape", `["\x"]`, dedup.ErrInvalidKey, `invalid escape \x`},
		{"short unicode escape", `["\u12"]`, dedup.ErrInvalidKey, "4 hex digits"},
		{"lone high surrogate", `["\ud800"]`, dedup.ErrInvalidKey, "lone surrogate"},
		{"lone low surrogate", `["\udc00"]`, dedup.ErrInvalidKey, "lone surrogate"},
		{"high surrogate and a letter", `["\ud800\u0041"]`, dedup.ErrInvalidKey, "lone surrogate"},
		{"invalid UTF-8", "[\"\xff\"]", dedup.ErrInvalidKey, "invalid UTF-8"},
		{"UTF-8 encoded surrogate", "[\"\xed\xa0\x80\"]", dedup.ErrInvalidKey, "invalid UTF-8"},
		{"byte order mark", "\xef\xbb\xbf{}", dedup.ErrInvalidKey, "expecting a value"},
		{"duplicate key", `{"a":1,"a":1}`, dedup.ErrInvalidKey, `duplicate key "a"`},
		{"duplicate key, escaped", `{"a":1,"\u0061":2}`, dedup.ErrInvalidKey, `duplicate key "a"`},
		{"duplicate key, nested", `[{"x":{"k":1,"j":2,"k":3}}]`, dedup.ErrInvalidKey, `duplicate key "k"`},
		{"too deep", strings.Repeat("[", 10001) + strings.Repeat("]", 10001), dedup.ErrInvalidKey, "nested more than 10000 deep"},
		{"a megabyte of garbage", megabyte, dedup.ErrInvalidKey, "at byte 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id, err := key(order{Body: []byte(tt.body)})
			wantErr(t, id, err, tt.target, tt.msg)
		})
	}
}

func TestCanonicalJSONLimits(t *testing.T) {
	t.Parallel()
	key := idstrategy.CanonicalJSON(orderBody)

	deepest := strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000)
	_, err := key(order{Body: []byte(deepest)})
	require.NoError(t, err, "10000 levels should be accepted")

	// Deep nesting with unsorted members: the two-pass design must not copy
	// the big value once per level.
	var b strings.Builder
	for range 5000 {
		b.WriteString(`{"z":0,"a":`)
	}
	b.WriteString(`"` + strings.Repeat("v", 1<<20) + `"`)
	b.WriteString(strings.Repeat("}", 5000))
	_, err = key(order{Body: []byte(b.String())})
	require.NoError(t, err)
}
