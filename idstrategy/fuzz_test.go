package idstrategy_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/idstrategy"
)

// compositeOf keys a raw list of parts, with a limit high enough that
// the fuzzer's long strings test the encoding, not the length check.
func compositeOf(parts ...string) (string, error) {
	fs := make([]dedup.KeyFunc[struct{}], len(parts))
	for i, p := range parts {
		fs[i] = func(struct{}) (string, error) { return p, nil }
	}
	return idstrategy.MaxLength(idstrategy.Composite(fs...), 1<<30)(struct{}{})
}

func FuzzComposite(f *testing.F) {
	f.Add("a:b", "c", "a", "b:c")
	f.Add(`a\`, "b", "a", `\b`)
	f.Add(`a\:`, "b", `a\`, ":b")
	f.Add("x", "y", "x", "y")
	f.Add("", "y", "x", "")
	f.Add("\xff", "y", "ü", "ß")
	f.Fuzz(func(t *testing.T, a1, b1, a2, b2 string) {
		p, q := []string{a1, b1}, []string{a2, b2}
		idP, errP := compositeOf(p...)
		idQ, errQ := compositeOf(q...)
		checkParts(t, p, idP, errP)
		checkParts(t, q, idQ, errQ)
		if errP != nil || errQ != nil {
			return
		}
		if slices.Equal(p, q) != (idP == idQ) {
			t.Fatalf("%q gave %q and %q gave %q", p, idP, q, idQ)
		}
		// Lists of different lengths never meet either.
		for _, r := range [][]string{{a1 + ":" + b1}, {a1, b1, a2}} {
			idR, errR := compositeOf(r...)
			checkParts(t, r, idR, errR)
			if errR == nil && idR == idP {
				t.Fatalf("%q and %q both gave %q", p, r, idP)
			}
		}
	})
}

// checkParts checks one composite result against its parts.
func checkParts(t *testing.T, parts []string, id string, err error) {
	t.Helper()
	empty, invalid := false, false
	for _, p := range parts {
		empty = empty || p == ""
		invalid = invalid || !utf8.ValidString(p)
	}
	switch {
	case empty && err == nil, invalid && err == nil:
		t.Fatalf("%q gave %q, want an error", parts, id)
	case empty || invalid:
		// The first bad part decides which sentinel, so either is right.
		if !errors.Is(err, dedup.ErrNoKey) && !errors.Is(err, dedup.ErrInvalidKey) {
			t.Fatalf("%q: error %v matches no sentinel", parts, err)
		}
	case err != nil:
		t.Fatalf("%q: %v", parts, err)
	default:
		if !utf8.ValidString(id) {
			t.Fatalf("%q gave invalid UTF-8 %q", parts, id)
		}
		if got := splitComposite(id); !slices.Equal(got, parts) {
			t.Fatalf("%q gave %q, which reads back as %q", parts, id, got)
		}
	}
}

// jsonString encodes s the way encoding/json does, HTML escapes included.
func jsonString(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// jsonStringEscaped encodes s with every character as a \u escape, surrogate
// pairs included: the same string, in bytes that share nothing with
// jsonString's.
func jsonStringEscaped(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		if r > 0xffff {
			r -= 0x10000
			fmt.Fprintf(&b, `\u%04X\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			continue
		}
		fmt.Fprintf(&b, `\u%04x`, r)
	}
	b.WriteByte('"')
	return b.String()
}

func FuzzCanonicalJSON(f *testing.F) {
	f.Add("id", "order-1", "items", "sku-9", int64(3))
	f.Add("a", "", "b", "\"\\\n", int64(-1))
	f.Add("é", "😀", "\u2028", "<&>", int64(1<<62))
	f.Add("k", "v", "k2", "v", int64(0))
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, n int64) {
		for _, s := range []string{k1, v1, k2, v2} {
			if !utf8.ValidString(s) {
				t.Skip("encoding/json would replace invalid UTF-8")
			}
		}
		if k1 == k2 {
			t.Skip("duplicate keys are rejected by design")
		}
		key := idstrategy.CanonicalJSON(func(doc string) ([]byte, error) { return []byte(doc), nil })
		build := func(v1 string, n int64) (compact, reordered string) {
			num := strconv.FormatInt(n, 10)
			compact = `{` + jsonString(k1) + `:` + jsonString(v1) + `,` + jsonString(k2) +
				`:{"n":` + num + `,"list":[` + jsonString(v2) + `,{"x":1,"y":2}]}}`
			e := jsonStringEscaped
			reordered = "\n{ " + e(k2) + " :\t{ " + e("list") + ": [ " + e(v2) + " , { \"y\" : 2 ,\"x\":1 } ] ,\r\n" +
				e("n") + " : " + num + " } , " + e(k1) + " : " + e(v1) + " }\n"
			return compact, reordered
		}
		compact, reordered := build(v1, n)
		idA, err := key(compact)
		if err != nil {
			t.Fatalf("%s: %v", compact, err)
		}
		idB, err := key(reordered)
		if err != nil {
			t.Fatalf("%s: %v", reordered, err)
		}
		if idA != idB {
			t.Fatalf("same document, two ids:\n%s -> %s\n%s -> %s", compact, idA, reordered, idB)
		}

		for _, change := range []struct {
			v1 string
			n  int64
		}{{v1 + "!", n}, {v2, n}, {v1, n + 1}} {
			if change.v1 == v1 && change.n == n {
				continue // v1 == v2: not a change
			}
			other, _ := build(change.v1, change.n)
			idC, err := key(other)
			if err != nil {
				t.Fatalf("%s: %v", other, err)
			}
			if idC == idA {
				t.Fatalf("different documents, one id:\n%s\n%s", compact, other)
			}
		}
	})
}

// FuzzStrategies feeds arbitrary ids to the producer-supplied strategies and
// their wrappers: no panic, and either a valid id or an error matching
// exactly one sentinel.
func FuzzStrategies(f *testing.F) {
	f.Add("order-1", "tenant", "{}")
	f.Add("", "", "")
	f.Add("\xff", strings.Repeat("x", 600), `{"a":1,"a":2}`)
	f.Fuzz(func(t *testing.T, id, other, body string) {
		msg := order{ID: id, Tenant: other, Headers: map[string]string{"Message-Id": other}, Body: []byte(body)}
		for i, key := range []dedup.KeyFunc[order]{
			idstrategy.Field("ID", orderID),
			idstrategy.Header("Message-Id", orderHeader),
			idstrategy.Composite(idstrategy.Field("ID", orderID), idstrategy.Field("Tenant", orderTenant)),
			idstrategy.HashLong(idstrategy.Field("ID", orderID), 100),
			idstrategy.MaxLength(idstrategy.Field("ID", orderID), 50),
			idstrategy.ContentHash(orderBody),
			idstrategy.CanonicalJSON(orderBody),
			idstrategy.FirstOf(idstrategy.Header("Message-Id", orderHeader), idstrategy.CanonicalJSON(orderBody)),
		} {
			got, err := key(msg)
			if err == nil {
				if err := adapter.ValidateID(got, 0); err != nil {
					t.Fatalf("strategy %d returned %q: %v", i, short(got), err)
				}
				continue
			}
			if got != "" || errors.Is(err, dedup.ErrNoKey) == errors.Is(err, dedup.ErrInvalidKey) {
				t.Fatalf("strategy %d: %q, %v", i, short(got), err)
			}
		}
	})
}
