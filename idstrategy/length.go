package idstrategy

import (
	"crypto/sha256"
	"encoding/hex"
	"unicode/utf8"

	"github.com/dedup-go/dedup"
)

// hashedLen is the length of "sha256:" and 64 hex digits.
const hashedLen = len("sha256:") + 2*sha256.Size

// HashLong replaces ids longer than limit bytes by "sha256:" and the hex
// SHA-256 of the id (71 bytes); shorter ids pass through unchanged. It is a
// choice to make explicitly: without it an over-long id fails with
// dedup.ErrInvalidKey, because a producer sending kilobyte ids is more often a
// bug worth seeing than a design. Hashing keeps ids distinct (SHA-256 does not
// collide in practice) but makes them unreadable in the store.
//
// inner's own too-long failures (a *TooLongError) are hashed too, which is
// what makes HashLong(Field(...), limit) work although Field rejects ids over
// adapter.DefaultMaxIDLength. Ids that are not valid UTF-8 are still rejected
// whatever their length: hashing would hide that the producer sends garbage.
//
// The result is at most limit bytes. A limit above adapter.DefaultMaxIDLength
// lets ids up to limit through unhashed, so the Receiver's
// Config.MaxIDLength must allow them. It panics if limit is shorter than a
// hashed id (71 bytes) or inner is nil.
func HashLong[M any](inner dedup.KeyFunc[M], limit int) dedup.KeyFunc[M] {
	switch {
	case inner == nil:
		misconfigured("HashLong", "inner is nil")
	case limit < hashedLen:
		misconfigured("HashLong", "limit is %d; it must be at least %d, the length of a hashed id", limit, hashedLen)
	}
	const strategy = "hash long"
	return func(m M) (string, error) {
		id, err := recoverLong(inner(m))
		if err != nil {
			return "", within(strategy, err)
		}
		if len(id) > limit && utf8.ValidString(id) {
			return hashID(id), nil
		}
		if err := check(strategy, id, limit); err != nil {
			return "", err
		}
		return id, nil
	}
}

// MaxLength holds inner's ids to limit bytes instead of
// adapter.DefaultMaxIDLength: lower, to fit a store with short keys, or higher,
// for producers with long ids (set the Receiver's Config.MaxIDLength to
// match). Longer ids fail with a *TooLongError, so HashLong around MaxLength
// hashes them. It panics if limit is not positive or inner is nil.
func MaxLength[M any](inner dedup.KeyFunc[M], limit int) dedup.KeyFunc[M] {
	switch {
	case inner == nil:
		misconfigured("MaxLength", "inner is nil")
	case limit <= 0:
		misconfigured("MaxLength", "limit is %d; it must be positive", limit)
	}
	const strategy = "max length"
	return func(m M) (string, error) {
		id, err := recoverLong(inner(m))
		if err != nil {
			return "", within(strategy, err)
		}
		if err := check(strategy, id, limit); err != nil {
			return "", err
		}
		return id, nil
	}
}

// hashID is "sha256:" and the hex SHA-256 of s, built in one allocation.
func hashID(s string) string {
	return hashBytes("sha256:", []byte(s))
}

func hashBytes(prefix string, data []byte) string {
	var buf [32 + 2*sha256.Size]byte
	sum := sha256.Sum256(data)
	n := copy(buf[:], prefix)
	hex.Encode(buf[n:], sum[:])
	return string(buf[:n+2*sha256.Size])
}
