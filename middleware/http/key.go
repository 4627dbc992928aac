package deduphttp

import (
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"unicode/utf8"

	"github.com/dedup-go/dedup/adapter"
)

// maxKeyLength is the longest Idempotency-Key accepted, in bytes (after
// unquoting an RFC 8941 string).
const maxKeyLength = 255

// hashedScopeLen is the length of a hashed scope: '#' and the base64 of a
// SHA-256. A scoped id is at most this plus maxKeyLength, which the
// receiver's MaxIDLength must allow.
const hashedScopeLen = 1 + 43

// minIDLength is the shortest Config.MaxIDLength the middleware accepts.
const minIDLength = hashedScopeLen + maxKeyLength

var (
	errKeyEmpty   = errors.New("the Idempotency-Key header is empty")
	errKeyLong    = errors.New("the Idempotency-Key is over " + strconv.Itoa(maxKeyLength) + " bytes")
	errKeyControl = errors.New("the Idempotency-Key holds a control character")
	errKeyASCII   = errors.New("the Idempotency-Key holds a byte outside printable ASCII (an RFC 8941 string is printable ASCII)")
	errKeyQuoted  = errors.New("the Idempotency-Key starts with '\"' but is not a valid RFC 8941 string")
	errKeyMany    = errors.New("the request has more than one Idempotency-Key header")
)

// parseKey returns the key of an Idempotency-Key header value: an RFC 8941
// sf-string ("..." with \" and \\ escapes) when it starts with a quote,
// else the raw value. Either way the key is printable ASCII (0x20 to
// 0x7E), as an sf-string is: a byte outside it (a control character, DEL,
// or any byte of a non-ASCII character) is refused. net/http has already
// trimmed the surrounding whitespace.
func parseKey(v string) (string, error) {
	if v != "" && v[0] == '"' {
		var err error
		if v, err = unquote(v); err != nil {
			return "", err
		}
	}
	switch {
	case v == "":
		return "", errKeyEmpty
	case len(v) > maxKeyLength:
		return "", errKeyLong
	}
	for i := range len(v) {
		switch c := v[i]; {
		case c < 0x20 || c == 0x7f:
			return "", errKeyControl
		case c > 0x7f:
			return "", errKeyASCII
		}
	}
	return v, nil
}

// unquote parses an RFC 8941 sf-string that must span all of v. It
// allocates only when the string holds escapes.
func unquote(v string) (string, error) {
	if len(v) < 2 || v[len(v)-1] != '"' {
		return "", errKeyQuoted
	}
	in := v[1 : len(v)-1]
	var out []byte
	for i := 0; i < len(in); i++ {
		c := in[i]
		switch {
		case c == '\\':
			if i+1 == len(in) || (in[i+1] != '"' && in[i+1] != '\\') {
				return "", errKeyQuoted
			}
			if out == nil {
				out = append(make([]byte, 0, len(in)), in[:i]...)
			}
			i++
			out = append(out, in[i])
			continue
		case c == '"':
			return "", errKeyQuoted
		case c < 0x20 || c == 0x7f:
			return "", errKeyControl
		case c > 0x7f:
			return "", errKeyASCII
		}
		if out != nil {
			out = append(out, c)
		}
	}
	if out == nil {
		return in, nil
	}
	return string(out), nil
}

// RecordID returns the id of the record the middleware keeps for an
// Idempotency-Key, so that an operator can find or forget one client's
// request: key is the key as the middleware read it (a quoted RFC 8941
// header value unquoted), principal what Options.Principal returned for
// the request ("" under SharedScope; a webhook endpoint's
// WebhookOptions.Sender), operation what Options.Operation returned (""
// when it is not set, the default), and maxIDLength the receiver's
// Config.MaxIDLength (0 for adapter.DefaultMaxIDLength).
//
// The record's store key is the receiver's namespace, ':' and this id: the
// KEY that dedupctl get and forget take, which they also build themselves
// from --principal, --operation and --idempotency-key. The id is the
// decimal length of the principal, ':', the principal, the decimal length
// of the operation, ':', the operation, and the key:
//
//	RecordID("acme", "", "pay-1", 0)           "4:acme0:pay-1"
//	RecordID("acme", "POST /pay", "pay-1", 0)  "4:acme9:POST /paypay-1"
//
// When that is longer than maxIDLength, or the principal and operation are
// not valid UTF-8, the length-prefixed principal and operation are replaced
// by '#' and the unpadded base64url of their SHA-256, and the key follows:
// "#" + base64url(sha256("4:acme0:")) + "pay-1". The lengths keep any two
// scopes apart, whatever their bytes; the key is in the clear either way.
func RecordID(principal, operation, key string, maxIDLength int) string {
	return string(appendScopedID(nil, principal, operation, key, cmp.Or(maxIDLength, adapter.DefaultMaxIDLength)))
}

// appendScopedID appends the record id of key in the scope (principal,
// operation) to dst: the decimal length of the principal, ':', the
// principal, the decimal length of the operation, ':', the operation, and
// the key. The lengths make the encoding injective: no two scopes, whatever
// their bytes, give the same id. The operation is empty unless
// Options.Operation names one.
//
// When that id would be longer than maxLen, or is not valid UTF-8 (an id
// must be), the scope is replaced by '#' and the base64 of its SHA-256.
// The plain form starts with a digit, the hashed one with '#', so the two
// never meet.
func appendScopedID(dst []byte, principal, op, key string, maxLen int) []byte {
	start := len(dst)
	dst = strconv.AppendInt(dst, int64(len(principal)), 10)
	dst = append(dst, ':')
	dst = append(dst, principal...)
	dst = strconv.AppendInt(dst, int64(len(op)), 10)
	dst = append(dst, ':')
	dst = append(dst, op...)
	if len(dst)-start+len(key) <= maxLen && utf8.Valid(dst[start:]) {
		return append(dst, key...)
	}
	sum := sha256.Sum256(dst[start:])
	dst = append(dst[:start], '#')
	dst = base64.RawURLEncoding.AppendEncode(dst, sum[:])
	return append(dst, key...)
}
