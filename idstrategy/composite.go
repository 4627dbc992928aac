package idstrategy

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
)

// Composite builds an id from several parts of the message, such as tenant,
// order number and event type, for producers that send no id of their own.
// Each part is a KeyFunc, so Field, Header and the other strategies can be
// parts and their errors say which field was missing; a plain
// func(M) (string, error) works too.
//
// The parts are joined with ':' after escaping '\' as `\\` and ':' as `\:`
// in each part. That keeps ids readable (tenant-7:order-42) and makes them
// unambiguous: ("a:b", "c") gives `a\:b:c` and ("a", "b:c") gives `a:b\:c`,
// because a ':' that separates parts is the only one without a '\' in front,
// so the parts can always be read back. Valid UTF-8 parts give a valid UTF-8
// id.
//
// A part that fails or returns "" fails the whole id (dedup.ErrNoKey naming
// the part): dropping it would make different messages share an id. A part
// that is not valid UTF-8 gives dedup.ErrInvalidKey. A part over the length
// limit is not an error by itself; the limit applies to the joined id, so
// HashLong around Composite hashes all of it.
//
// It panics if there are no parts or a part is nil.
func Composite[M any](parts ...dedup.KeyFunc[M]) dedup.KeyFunc[M] {
	requireFuncs("Composite", "part", "parts", parts)
	parts = append([]dedup.KeyFunc[M](nil), parts...) // the caller may reuse its slice
	const strategy = "composite"
	return func(m M) (string, error) {
		var stack [8]string
		values := stack[:0]
		size := len(parts) - 1
		for i, part := range parts {
			v, err := recoverLong(part(m))
			if err != nil {
				return "", within(partName(i, len(parts)), err)
			}
			if v == "" {
				return "", noKey(partName(i, len(parts)), "the part is empty")
			}
			if !utf8.ValidString(v) {
				return "", invalidKey(partName(i, len(parts)), "the part is not valid UTF-8")
			}
			size += len(v) + countEscapes(v)
			values = append(values, v)
		}
		var b strings.Builder
		b.Grow(size)
		for i, v := range values {
			if i > 0 {
				b.WriteByte(':')
			}
			writeEscaped(&b, v)
		}
		id := b.String()
		if err := check(strategy, id, adapter.DefaultMaxIDLength); err != nil {
			return "", err
		}
		return id, nil
	}
}

func partName(i, n int) string {
	return fmt.Sprintf("composite part %d of %d", i+1, n)
}

// countEscapes counts the bytes of v that need a '\' in front.
func countEscapes(v string) int {
	n := 0
	for i := 0; i < len(v); i++ {
		if v[i] == ':' || v[i] == '\\' {
			n++
		}
	}
	return n
}

// writeEscaped writes v with '\' and ':' escaped by a '\'.
func writeEscaped(b *strings.Builder, v string) {
	start := 0
	for i := 0; i < len(v); i++ {
		if v[i] == ':' || v[i] == '\\' {
			b.WriteString(v[start:i])
			b.WriteByte('\\')
			start = i // the byte itself goes out with the next run
		}
	}
	b.WriteString(v[start:])
}
