package idstrategy

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// maxJSONDepth is how deep arrays and objects may nest, as in encoding/json.
// Parsing and writing recurse, so the limit bounds the stack.
const maxJSONDepth = 10000

// The canonicalizer is a parser of its own rather than encoding/json because
// encoding/json silently keeps the last of duplicate keys and replaces invalid
// UTF-8 and lone surrogates by U+FFFD, all of which would let different bodies
// share an id.
//
// It works in two passes so that no byte is moved more than once whatever the
// nesting: parsing writes the canonical text of every string and number into
// buf and records the document's shape as nodes; sorting an object reorders
// only its member records; writing walks the nodes and copies the pieces of
// buf in canonical order into out.
type canonicalizer struct {
	in  []byte
	pos int

	buf     []byte   // canonical strings and scalars, in document order
	nodes   []node   // every value
	members []member // every object member, each object's sorted and contiguous
	items   []int32  // every array element, each array's contiguous
	out     []byte   // the canonical document

	memberStack []member // members of the objects being parsed
	itemStack   []int32  // elements of the arrays being parsed
}

type nodeKind uint8

const (
	scalarNode nodeKind = iota // buf[from:to] is its canonical text
	objectNode                 // members[from:to] are its members, sorted
	arrayNode                  // items[from:to] are its elements, in order
)

type node struct {
	kind     nodeKind
	from, to int32
}

// member is an object member: buf[keyFrom:keyTo] is the canonical key with
// its quotes.
type member struct {
	keyFrom, keyTo int32
	value          int32
}

// syntaxError is a reason why the document has no canonical form.
type syntaxError struct {
	offset int
	msg    string
}

func (e *syntaxError) Error() string { return fmt.Sprintf("at byte %d: %s", e.offset, e.msg) }

// errTooLarge keeps the int32 offsets honest; a 2 GiB body is not a message.
var errTooLarge = errors.New("the body is over 1 GiB")

var canonicalizers = sync.Pool{New: func() any { return new(canonicalizer) }}

func getCanonicalizer() *canonicalizer { return canonicalizers.Get().(*canonicalizer) }

// putCanonicalizer keeps the buffers for the next message, unless one big
// message made them big: a pool full of megabyte buffers is a leak.
func putCanonicalizer(c *canonicalizer) {
	const maxKept = 64 << 10
	if cap(c.buf) > maxKept || cap(c.out) > maxKept || cap(c.nodes) > maxKept/8 {
		return
	}
	c.in = nil
	canonicalizers.Put(c)
}

// canonicalize returns the canonical form of the JSON document in, valid
// until the next call.
func (c *canonicalizer) canonicalize(in []byte) ([]byte, error) {
	if len(in) > 1<<30 {
		return nil, errTooLarge
	}
	c.in, c.pos = in, 0
	c.buf, c.nodes, c.members, c.items, c.out = c.buf[:0], c.nodes[:0], c.members[:0], c.items[:0], c.out[:0]
	c.memberStack, c.itemStack = c.memberStack[:0], c.itemStack[:0]

	c.skipSpace()
	root, err := c.value(0)
	if err != nil {
		return nil, err
	}
	c.skipSpace()
	if c.pos < len(c.in) {
		return nil, c.errorf("unexpected %s after the document", c.describe())
	}
	c.write(root)
	return c.out, nil
}

func (c *canonicalizer) errorf(format string, args ...any) error {
	return &syntaxError{offset: c.pos, msg: fmt.Sprintf(format, args...)}
}

// describe names the byte at pos for an error message.
func (c *canonicalizer) describe() string {
	if c.pos >= len(c.in) {
		return "end of the document"
	}
	return fmt.Sprintf("%q", c.in[c.pos])
}

func (c *canonicalizer) skipSpace() {
	for c.pos < len(c.in) {
		switch c.in[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

func (c *canonicalizer) addNode(n node) int32 {
	c.nodes = append(c.nodes, n)
	return int32(len(c.nodes) - 1)
}

// value parses the value at pos, which is not whitespace.
func (c *canonicalizer) value(depth int) (int32, error) {
	if c.pos >= len(c.in) {
		return 0, c.errorf("unexpected end of the document, expecting a value")
	}
	switch ch := c.in[c.pos]; {
	case ch == '{':
		return c.object(depth + 1)
	case ch == '[':
		return c.array(depth + 1)
	case ch == '"':
		from := int32(len(c.buf))
		if err := c.str(); err != nil {
			return 0, err
		}
		return c.addNode(node{kind: scalarNode, from: from, to: int32(len(c.buf))}), nil
	case ch == '-' || ('0' <= ch && ch <= '9'):
		return c.number()
	case ch == 't':
		return c.literal("true")
	case ch == 'f':
		return c.literal("false")
	case ch == 'n':
		return c.literal("null")
	}
	return 0, c.errorf("unexpected %s, expecting a value", c.describe())
}

func (c *canonicalizer) literal(word string) (int32, error) {
	if !bytes.HasPrefix(c.in[c.pos:], []byte(word)) {
		return 0, c.errorf("invalid literal, expecting %s", word)
	}
	from := int32(len(c.buf))
	c.buf = append(c.buf, word...)
	c.pos += len(word)
	return c.addNode(node{kind: scalarNode, from: from, to: int32(len(c.buf))}), nil
}

// number checks the JSON number grammar and keeps the number as written.
func (c *canonicalizer) number() (int32, error) {
	start := c.pos
	if c.in[c.pos] == '-' {
		c.pos++
	}
	switch {
	case c.pos < len(c.in) && c.in[c.pos] == '0':
		c.pos++
	case c.pos < len(c.in) && '1' <= c.in[c.pos] && c.in[c.pos] <= '9':
		c.digits()
	default:
		return 0, c.errorf("invalid number, expecting a digit")
	}
	if c.pos < len(c.in) && c.in[c.pos] == '.' {
		c.pos++
		if c.digits() == 0 {
			return 0, c.errorf("invalid number, expecting a digit after '.'")
		}
	}
	if c.pos < len(c.in) && (c.in[c.pos] == 'e' || c.in[c.pos] == 'E') {
		c.pos++
		if c.pos < len(c.in) && (c.in[c.pos] == '+' || c.in[c.pos] == '-') {
			c.pos++
		}
		if c.digits() == 0 {
			return 0, c.errorf("invalid number, expecting a digit in the exponent")
		}
	}
	from := int32(len(c.buf))
	c.buf = append(c.buf, c.in[start:c.pos]...)
	return c.addNode(node{kind: scalarNode, from: from, to: int32(len(c.buf))}), nil
}

func (c *canonicalizer) digits() int {
	start := c.pos
	for c.pos < len(c.in) && '0' <= c.in[c.pos] && c.in[c.pos] <= '9' {
		c.pos++
	}
	return c.pos - start
}

// str parses the string at pos and appends its canonical encoding to buf.
func (c *canonicalizer) str() error {
	c.pos++ // '"'
	c.buf = append(c.buf, '"')
	for {
		// Copy the run of bytes that need no attention in one go.
		run := c.pos
		for run < len(c.in) {
			ch := c.in[run]
			if ch < 0x20 || ch == '"' || ch == '\\' || ch >= utf8.RuneSelf {
				break
			}
			run++
		}
		c.buf = append(c.buf, c.in[c.pos:run]...)
		c.pos = run
		if c.pos >= len(c.in) {
			return c.errorf("unexpected end of the document in a string")
		}
		switch ch := c.in[c.pos]; {
		case ch == '"':
			c.pos++
			c.buf = append(c.buf, '"')
			return nil
		case ch < 0x20:
			return c.errorf("control character %q in a string; it must be escaped", ch)
		case ch == '\\':
			r, err := c.escape()
			if err != nil {
				return err
			}
			c.appendRune(r)
		default:
			r, size := utf8.DecodeRune(c.in[c.pos:])
			if r == utf8.RuneError && size <= 1 {
				return c.errorf("invalid UTF-8 in a string")
			}
			c.buf = append(c.buf, c.in[c.pos:c.pos+size]...)
			c.pos += size
		}
	}
}

// escape decodes the escape sequence at pos.
func (c *canonicalizer) escape() (rune, error) {
	if c.pos+1 >= len(c.in) {
		return 0, c.errorf("unexpected end of the document in an escape")
	}
	ch := c.in[c.pos+1]
	c.pos += 2
	switch ch {
	case '"', '\\', '/':
		return rune(ch), nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'u':
		r, err := c.hex4()
		if err != nil {
			return 0, err
		}
		if !utf16.IsSurrogate(r) {
			return r, nil
		}
		if r >= 0xdc00 || !bytes.HasPrefix(c.in[c.pos:], []byte(`\u`)) {
			return 0, c.errorf("lone surrogate \\u%04x in a string", r)
		}
		c.pos += 2
		low, err := c.hex4()
		if err != nil {
			return 0, err
		}
		pair := utf16.DecodeRune(r, low)
		if pair == utf8.RuneError {
			return 0, c.errorf("lone surrogate \\u%04x in a string", r)
		}
		return pair, nil
	}
	c.pos--
	return 0, c.errorf("invalid escape \\%c in a string", ch)
}

func (c *canonicalizer) hex4() (rune, error) {
	if c.pos+4 > len(c.in) {
		return 0, c.errorf("unexpected end of the document in a \\u escape")
	}
	var r rune
	for _, ch := range c.in[c.pos : c.pos+4] {
		var d byte
		switch {
		case '0' <= ch && ch <= '9':
			d = ch - '0'
		case 'a' <= ch && ch <= 'f':
			d = ch - 'a' + 10
		case 'A' <= ch && ch <= 'F':
			d = ch - 'A' + 10
		default:
			return 0, c.errorf("invalid \\u escape, expecting 4 hex digits")
		}
		r = r<<4 | rune(d)
	}
	c.pos += 4
	return r, nil
}

// appendRune appends r, decoded from an escape, as the canonical encoding
// writes it, which is how the same rune would appear unescaped.
func (c *canonicalizer) appendRune(r rune) {
	switch r {
	case '"':
		c.buf = append(c.buf, `\"`...)
	case '\\':
		c.buf = append(c.buf, `\\`...)
	case '\b':
		c.buf = append(c.buf, `\b`...)
	case '\f':
		c.buf = append(c.buf, `\f`...)
	case '\n':
		c.buf = append(c.buf, `\n`...)
	case '\r':
		c.buf = append(c.buf, `\r`...)
	case '\t':
		c.buf = append(c.buf, `\t`...)
	default:
		if r < 0x20 {
			const hexDigits = "0123456789abcdef"
			c.buf = append(c.buf, '\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&0xf])
			return
		}
		c.buf = utf8.AppendRune(c.buf, r)
	}
}

func (c *canonicalizer) object(depth int) (int32, error) {
	if depth > maxJSONDepth {
		return 0, c.errorf("nested more than %d deep", maxJSONDepth)
	}
	c.pos++ // '{'
	base := len(c.memberStack)
	c.skipSpace()
	if c.pos < len(c.in) && c.in[c.pos] == '}' {
		c.pos++
		return c.addNode(node{kind: objectNode, from: int32(len(c.members)), to: int32(len(c.members))}), nil
	}
	for {
		if c.pos >= len(c.in) || c.in[c.pos] != '"' {
			return 0, c.errorf("unexpected %s, expecting a key", c.describe())
		}
		keyFrom := int32(len(c.buf))
		if err := c.str(); err != nil {
			return 0, err
		}
		keyTo := int32(len(c.buf))
		c.skipSpace()
		if c.pos >= len(c.in) || c.in[c.pos] != ':' {
			return 0, c.errorf("unexpected %s, expecting ':' after a key", c.describe())
		}
		c.pos++
		c.skipSpace()
		v, err := c.value(depth)
		if err != nil {
			return 0, err
		}
		c.memberStack = append(c.memberStack, member{keyFrom: keyFrom, keyTo: keyTo, value: v})
		c.skipSpace()
		if c.pos < len(c.in) && c.in[c.pos] == ',' {
			c.pos++
			c.skipSpace()
			continue
		}
		if c.pos < len(c.in) && c.in[c.pos] == '}' {
			c.pos++
			break
		}
		return 0, c.errorf("unexpected %s, expecting ',' or '}' in an object", c.describe())
	}

	ms := c.memberStack[base:]
	slices.SortFunc(ms, c.compareKeys)
	for i := 1; i < len(ms); i++ {
		if c.compareKeys(ms[i-1], ms[i]) == 0 {
			key := c.buf[ms[i].keyFrom:ms[i].keyTo]
			return 0, &syntaxError{offset: c.pos - 1, msg: "duplicate key " + quote(string(key[1:len(key)-1])) + " in the object ending here"}
		}
	}
	from := int32(len(c.members))
	c.members = append(c.members, ms...)
	c.memberStack = c.memberStack[:base]
	return c.addNode(node{kind: objectNode, from: from, to: int32(len(c.members))}), nil
}

// compareKeys orders members as RFC 8785 does: by the UTF-16 code units of
// the decoded keys. Keys are equal exactly when their decoded strings are.
func (c *canonicalizer) compareKeys(a, b member) int {
	return compareUTF16(c.buf[a.keyFrom+1:a.keyTo-1], c.buf[b.keyFrom+1:b.keyTo-1])
}

// compareUTF16 compares two canonical string encodings (without their quotes)
// by the UTF-16 code units of the strings they encode. Neither the bytes of
// the encoding nor those of UTF-8 will do: an escape sorts by its backslash
// (a newline, written \n, would follow "1"), and UTF-8 puts U+E000-U+FFFF
// before the characters above U+FFFF, which UTF-16 writes with surrogates
// from U+D800.
//
// The canonical encoding writes each character one way only, so equal
// characters are equal bytes and the loop can step over them without
// decoding; only the first differing character is decoded.
func compareUTF16(a, b []byte) int {
	for len(a) > 0 && len(b) > 0 {
		if a[0] == b[0] && a[0] < utf8.RuneSelf && a[0] != '\\' {
			a, b = a[1:], b[1:]
			continue
		}
		ra, na := decodeCanonical(a)
		rb, nb := decodeCanonical(b)
		if ra != rb {
			return cmp.Compare(utf16Rank(ra), utf16Rank(rb))
		}
		a, b = a[na:], b[nb:]
	}
	return cmp.Compare(len(a), len(b))
}

// decodeCanonical decodes the first character of a canonical string
// encoding, which is valid UTF-8 and holds only the escapes appendRune
// writes, and returns it with its length in bytes.
func decodeCanonical(s []byte) (rune, int) {
	if s[0] != '\\' {
		return utf8.DecodeRune(s)
	}
	switch s[1] {
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u': // \u00XX, a control character
		return rune(unhex(s[4])<<4 | unhex(s[5])), 6
	}
	return rune(s[1]), 2 // '"' or '\\'
}

func unhex(ch byte) byte {
	if ch <= '9' {
		return ch - '0'
	}
	return ch - 'a' + 10
}

// utf16Rank maps a character (never a surrogate: the parser refuses lone
// ones) to a number that sorts as its UTF-16 encoding does. That is code
// point order, except that U+E000-U+FFFF follow every character above U+FFFF,
// whose first code unit is a surrogate, U+D800-U+DBFF.
func utf16Rank(r rune) rune {
	if 0xe000 <= r && r <= 0xffff {
		return r + unicode.MaxRune + 1
	}
	return r
}

func (c *canonicalizer) array(depth int) (int32, error) {
	if depth > maxJSONDepth {
		return 0, c.errorf("nested more than %d deep", maxJSONDepth)
	}
	c.pos++ // '['
	base := len(c.itemStack)
	c.skipSpace()
	if c.pos < len(c.in) && c.in[c.pos] == ']' {
		c.pos++
		return c.addNode(node{kind: arrayNode, from: int32(len(c.items)), to: int32(len(c.items))}), nil
	}
	for {
		v, err := c.value(depth)
		if err != nil {
			return 0, err
		}
		c.itemStack = append(c.itemStack, v)
		c.skipSpace()
		if c.pos < len(c.in) && c.in[c.pos] == ',' {
			c.pos++
			c.skipSpace()
			continue
		}
		if c.pos < len(c.in) && c.in[c.pos] == ']' {
			c.pos++
			break
		}
		return 0, c.errorf("unexpected %s, expecting ',' or ']' in an array", c.describe())
	}
	from := int32(len(c.items))
	c.items = append(c.items, c.itemStack[base:]...)
	c.itemStack = c.itemStack[:base]
	return c.addNode(node{kind: arrayNode, from: from, to: int32(len(c.items))}), nil
}

// write appends the canonical text of node n to out.
func (c *canonicalizer) write(n int32) {
	nd := c.nodes[n]
	switch nd.kind {
	case scalarNode:
		c.out = append(c.out, c.buf[nd.from:nd.to]...)
	case objectNode:
		c.out = append(c.out, '{')
		for i, m := range c.members[nd.from:nd.to] {
			if i > 0 {
				c.out = append(c.out, ',')
			}
			c.out = append(c.out, c.buf[m.keyFrom:m.keyTo]...)
			c.out = append(c.out, ':')
			c.write(m.value)
		}
		c.out = append(c.out, '}')
	case arrayNode:
		c.out = append(c.out, '[')
		for i, item := range c.items[nd.from:nd.to] {
			if i > 0 {
				c.out = append(c.out, ',')
			}
			c.write(item)
		}
		c.out = append(c.out, ']')
	}
}
