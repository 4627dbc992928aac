package idstrategy

import (
	"github.com/dedup-go/dedup"
)

// ContentHash uses "sha256:" and the hex SHA-256 of the body as the id, for
// producers that send no id: the same bytes published twice are one message.
// Any byte of difference, a timestamp in an envelope or JSON fields in another
// order, makes another id; use CanonicalJSON for JSON bodies and make body
// return only the part that identifies the message.
//
// An empty body fails with dedup.ErrNoKey: hashing it would make every empty
// message a duplicate of the first. An error from body is returned matching
// dedup.ErrInvalidKey (unless it already matches dedup.ErrNoKey).
//
// It panics if body is nil.
func ContentHash[M any](body func(M) ([]byte, error)) dedup.KeyFunc[M] {
	if body == nil {
		misconfigured("ContentHash", "body is nil")
	}
	return func(m M) (string, error) {
		data, err := readBody("content hash", body, m)
		if err != nil {
			return "", err
		}
		return hashBytes("sha256:", data), nil
	}
}

// readBody returns the body a hashing strategy hashes. An empty body is
// ErrNoKey: hashing it would make every empty message a duplicate of the
// first.
func readBody[M any](strategy string, body func(M) ([]byte, error), m M) ([]byte, error) {
	data, err := body(m)
	if err != nil {
		return nil, within(strategy+", reading the body", err)
	}
	if len(data) == 0 {
		return nil, noKey(strategy, "the body is empty")
	}
	return data, nil
}

// CanonicalJSON uses "json-sha256:" and the hex SHA-256 of the body's
// canonical JSON form as the id, so that the same JSON document serialised
// differently (fields in another order, other whitespace, other string
// escapes) gives the same id. The prefix differs from ContentHash's because
// the two hash different things.
//
// The canonical form is that of RFC 8785 (the JSON Canonicalization Scheme),
// except for numbers:
//   - objects have their members sorted by key as RFC 8785 sorts them: by the
//     UTF-16 code units of the decoded key (so "\r" comes before "1", and
//     U+1F600 before U+FB01, although UTF-8 orders them the other way),
//     recursively in nested objects and arrays;
//   - insignificant whitespace is removed;
//   - strings are decoded and re-encoded one way: '"', '\' and control
//     characters escaped (\n, \t and so on where JSON has a short escape,
//     \u00XX otherwise), everything else written as UTF-8, so "\u00e9", "\u00E9"
//     and "é" are one string;
//   - numbers are kept exactly as written (RFC 8785 rewrites them as IEEE 754
//     doubles): 1, 1.0 and 1e0 give different ids. Making them equal would
//     need exact decimal arithmetic, and going through float64 would make
//     distinct large numbers (ids above 2^53, amounts with many digits)
//     equal: a false duplicate loses a message, while a missed one is only
//     processed twice (and redeliveries of the same bytes still get the same
//     id);
//   - array order is kept: it is significant.
//
// Documents that JSON parsers read differently are rejected with
// dedup.ErrInvalidKey rather than hashed one way: an object with a duplicate
// key (parsers keep the first, the last or fail), a string with invalid UTF-8
// or a lone surrogate escape such as "\ud800" (they are replaced by U+FFFD
// differently, or not at all, and replacing would make distinct bodies
// equal), and nesting deeper than 10000, as encoding/json also refuses.
// Invalid JSON fails with dedup.ErrInvalidKey naming the byte offset, an
// empty body with dedup.ErrNoKey; an error from body is returned matching
// dedup.ErrInvalidKey (unless it already matches dedup.ErrNoKey).
//
// It panics if body is nil.
func CanonicalJSON[M any](body func(M) ([]byte, error)) dedup.KeyFunc[M] {
	if body == nil {
		misconfigured("CanonicalJSON", "body is nil")
	}
	const strategy = "canonical JSON"
	return func(m M) (string, error) {
		data, err := readBody(strategy, body, m)
		if err != nil {
			return "", err
		}
		c := getCanonicalizer()
		defer putCanonicalizer(c)
		canon, err := c.canonicalize(data)
		if err != nil {
			return "", invalidKey(strategy, err.Error())
		}
		return hashBytes("json-sha256:", canon), nil
	}
}
