package dedupgrpc

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"unicode/utf8"
)

// hashedPrefix starts the id of a scope too long to spell out. A spelled
// out id starts with a digit, so the two forms never meet.
const hashedPrefix = "sha256:"

// hashedIDLength is the length of a hashed id, the shortest MaxIDLength
// the interceptor accepts.
const hashedIDLength = len(hashedPrefix) + 2*sha256.Size

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
