package dedupgrpc

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dedup-go/dedup/adapter"
)

// hashedPrefix starts the id of a scope too long to spell out. A spelled
// out id starts with a digit, so the two forms never meet.
const hashedPrefix = "sha256:"

// hashedIDLength is the length of a hashed id, the shortest MaxIDLength
// the interceptor accepts.
const hashedIDLength = len(hashedPrefix) + 2*sha256.Size

// RecordID returns the id of the record the interceptor keeps for an
// idempotency key, so that an operator can find or forget one caller's
// call: key is the key as the interceptor read it (Options.Key; a quoted
// RFC 8941 metadata value unquoted), principal what Options.Principal
// returned for the call ("" under SharedScope), and maxIDLength the
// receiver's Config.MaxIDLength (0 for adapter.DefaultMaxIDLength). The
// method is not part of it: it is in the record's fingerprint.
//
// The record's store key is the receiver's namespace, ':' and this id: the
// KEY that dedupctl get and forget take, which they also build themselves
// from --principal and --idempotency-key with --middleware grpc. The id
// is the decimal length of the principal, ':', the principal, ':' and the
// key:
//
//	RecordID("alice", "k-1", 0)  "5:alice:k-1"
//
// When that is longer than maxIDLength, or the principal is not valid
// UTF-8, the id is "sha256:" and the lowercase hex SHA-256 of that
// spelled-out form instead, key included.
func RecordID(principal, key string, maxIDLength int) string {
	return scopedID(principal, key, cmp.Or(maxIDLength, adapter.DefaultMaxIDLength))
}

// scopedID returns the receiver id of key used by principal. Spelled out,
// it is
//
//	len(principal) ":" principal ":" key
//
// which a reader of the store can follow and which no two scopes share:
// the length says where the principal ends, whatever bytes it holds, so
// ("a:b", "c") and ("a", "b:c") differ. When that id would be longer than
// maxLen (or is not UTF-8, which the receiver refuses), the id is
// "sha256:" and the hex SHA-256 of the spelled-out form instead. The
// method is not in the id but in the fingerprint: the key on another
// method is the same record, and refused as reused.
func scopedID(principal, key string, maxLen int) string {
	pl := strconv.Itoa(len(principal))
	var b strings.Builder
	b.Grow(len(pl) + 1 + len(principal) + 1 + len(key))
	b.WriteString(pl)
	b.WriteByte(':')
	b.WriteString(principal)
	b.WriteByte(':')
	b.WriteString(key)
	id := b.String()
	if len(id) <= maxLen && utf8.ValidString(principal) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return hashedPrefix + hex.EncodeToString(sum[:])
}
