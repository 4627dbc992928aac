package outbox

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// idDomain separates these hashes from any other SHA-256 of the same
// bytes, and names the derivation's version.
const idDomain = "dedup-outgoing-v1"

// IDLength is the length of every id MessageID returns, in bytes.
const IDLength = 32

// MessageID returns the id of the outgoing message named name, written by
// the handler that holds the claim of key (the receiver's key: its
// namespace, a colon, the incoming message's id; store.HeldClaim.Key).
//
// The id is the first 128 bits of SHA-256 over "dedup-outgoing-v1", key
// and name, each of the last two preceded by its length in bytes as a
// uvarint (so that no key and name run into another pair's), written as
// 32 lowercase hexadecimal digits. It depends on nothing else: not on the
// claim's token or attempt, the time, the process, so a handler that runs
// again for the same message (after a rollback, a crash, a lease taken
// over) derives the same ids, and the next consumer's deduplication
// recognises the copies. Two receivers with different namespaces handling
// the same incoming message derive different ids: each has effects of its
// own.
//
// The name tells a handler's messages apart; it must be the same on every
// run: a fixed name ("payment-captured"), an id from the message
// ("line-" + lineID), or a position in an order that does not change
// ("1", "2", ... : the outbox writer names an unnamed message by its
// position this way). Two messages of one handler run must not share a
// name: the second would be taken for a copy of the first.
func MessageID(key, name string) string {
	h := sha256.New()
	h.Write([]byte(idDomain))
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(key)))])
	h.Write([]byte(key))
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(name)))])
	h.Write([]byte(name))
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:IDLength/2])
}

// NewMessageID returns a fresh random message id, of the same shape as
// MessageID's: 32 lowercase hexadecimal digits (128 bits). It is for a
// message no handler derives (a producer's first publish, outside a
// handler): set it before the first publish and keep it for every retry
// of that publish, so that the consumer's receiver recognises the copies.
func NewMessageID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}
