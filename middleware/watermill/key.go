package dedupwatermill

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/idstrategy"
)

// FromUUID keys a message by its UUID (message.Message.UUID), the default:
// Watermill's publishers carry it across the broker, and a producer that
// publishes one message twice publishes the same UUID. A message with an
// empty UUID has no id (dedup.ErrNoKey).
func FromUUID() dedup.KeyFunc[*message.Message] {
	return idstrategy.Field("UUID", func(m *message.Message) string { return m.UUID })
}

// FromMetadata keys a message by the metadata value name (an order id the
// producer set, say). A message without it has no id (dedup.ErrNoKey).
func FromMetadata(name string) dedup.KeyFunc[*message.Message] {
	return idstrategy.Header(name, func(m *message.Message, name string) (string, bool) {
		v, ok := m.Metadata[name]
		return v, ok
	})
}

// PayloadHash keys a message by the SHA-256 of its payload, for producers
// that set no usable id: two messages with the same payload are then one
// message. Watermill's Deduplicator hashes the payload by default (with
// Adler-32, which merges distinct payloads); prefer an id the producer
// sets.
func PayloadHash() dedup.KeyFunc[*message.Message] {
	return idstrategy.ContentHash(func(m *message.Message) ([]byte, error) { return m.Payload, nil })
}

// hashedPrefix starts the id of a scoped id too long to spell out. A
// spelled-out scoped id starts with a digit, and an unscoped one is the
// key itself.
const hashedPrefix = "sha256:"

// RecordID returns the id of the record the middleware keeps for a
// message, so that an operator can find or forget it (dedupctl get and
// forget take the receiver's namespace, ':' and this id): scope is what
// Options.Scope returned for the message (the topic, by default), key what
// Options.Key returned, and maxIDLength the receiver's Config.MaxIDLength
// (0 for adapter.DefaultMaxIDLength).
//
// With an empty scope the id is the key. Otherwise it is the decimal
// length of the scope, ':', the scope, ':' and the key, so that no two
// scopes share an id:
//
//	RecordID("orders", "4f1c", 0)  "6:orders:4f1c"
//
// When that is longer than maxIDLength, the id is "sha256:" and the hex
// SHA-256 of that spelled-out form instead.
func RecordID(scope, key string, maxIDLength int) string {
	return scopedID(scope, key, cmp.Or(maxIDLength, adapter.DefaultMaxIDLength))
}

func scopedID(scope, key string, maxLen int) string {
	if scope == "" {
		return key
	}
	sl := strconv.Itoa(len(scope))
	var b strings.Builder
	b.Grow(len(sl) + 2 + len(scope) + len(key))
	b.WriteString(sl)
	b.WriteByte(':')
	b.WriteString(scope)
	b.WriteByte(':')
	b.WriteString(key)
	id := b.String()
	if len(id) <= maxLen {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return hashedPrefix + hex.EncodeToString(sum[:])
}

// idOf is the receiver's KeyFunc: Options.Key's id, scoped by
// Options.Scope. The receiver recovers a panic of either.
func (mw *Middleware) idOf(c *call) (string, error) {
	key, err := mw.s.Key(c.msg)
	if err != nil {
		return "", err
	}
	if key == "" {
		return "", fmt.Errorf("%w: the key func returned an empty id", dedup.ErrNoKey)
	}
	return scopedID(mw.s.Scope(c.msg), key, mw.s.maxIDLength), nil
}
