package memcore

import (
	"encoding/binary"
	"unsafe"
)

// A settled record keeps its variable parts in one string, its data: the
// key alone when it has no fingerprint, last error or result (a new
// message with an empty result: the key is the caller's own string, kept
// without a copy), or else packed as
//
//	uvarint(len(key)) key uvarint(len(fingerprint)) uvarint(len(lastError))
//	fingerprint lastError result
//
// in one allocation. Four strings and a slice in the record were 88 bytes
// of headers and up to four allocations, each rounded up to its size
// class; this is 16 bytes of header and one allocation, whose three length
// bytes (for parts under 128 bytes) usually fit in the rounding.

// pack returns the data of a record and whether it is packed (else it is
// key itself). The result is copied: callers reuse their buffers.
func pack(key, fingerprint, lastError string, result []byte) (string, bool) {
	if fingerprint == "" && lastError == "" && len(result) == 0 {
		return key, false
	}
	n := uvarintLen(len(key)) + uvarintLen(len(fingerprint)) + uvarintLen(len(lastError)) +
		len(key) + len(fingerprint) + len(lastError) + len(result)
	b := make([]byte, 0, n)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = binary.AppendUvarint(b, uint64(len(fingerprint)))
	b = binary.AppendUvarint(b, uint64(len(lastError)))
	b = append(b, fingerprint...)
	b = append(b, lastError...)
	b = append(b, result...)
	// b is never written again: it may be a string (strings.Builder makes
	// its strings the same way).
	return unsafe.String(unsafe.SliceData(b), len(b)), true
}

// packedKey returns the key of packed data without reading the rest: the
// length of a key under 128 bytes is its first byte.
func packedKey(data string) string {
	if kl := int(data[0]); kl < 0x80 {
		return data[1 : 1+kl]
	}
	kl, off := uvarint(data, 0)
	return data[off : off+kl]
}

// unpack returns the parts of packed data. The result shares its memory
// with data, so a replay copies nothing; the store contract makes it
// read-only, and its capacity ends where it does, so that an append
// copies rather than writes into the store.
func unpack(data string) (key, fingerprint, lastError string, result []byte) {
	kl, off := uvarint(data, 0)
	key = data[off : off+kl]
	fl, off := uvarint(data, off+kl)
	el, off := uvarint(data, off)
	fingerprint = data[off : off+fl]
	off += fl
	lastError = data[off : off+el]
	off += el
	if rest := data[off:]; rest != "" {
		result = unsafe.Slice(unsafe.StringData(rest), len(rest))
	}
	return key, fingerprint, lastError, result
}

// uvarint decodes the uvarint of data at off, written by pack, and
// returns it and the offset after it.
func uvarint(data string, off int) (int, int) {
	var v uint64
	for shift := 0; ; shift += 7 {
		c := data[off]
		off++
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return int(v), off
		}
	}
}

func uvarintLen(n int) int {
	l := 1
	for n >= 0x80 {
		n >>= 7
		l++
	}
	return l
}
