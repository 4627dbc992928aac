package nats

import (
	"strconv"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/nats-io/nats.go/jetstream"
)

// headerOf reads a header of m, reporting whether it is present.
func headerOf[T any](m *Msg[T], name string) (string, bool) {
	vs := m.Header.Values(name)
	if len(vs) == 0 {
		return "", false
	}
	return vs[0], true
}

// MsgID uses the Nats-Msg-Id header, the producer's id that JetStream also
// deduplicates on within the stream's duplicate window. A message without
// it fails with dedup.ErrNoKey (poison: dead-lettered).
func MsgID[T any]() dedup.KeyFunc[*Msg[T]] {
	return idstrategy.Header(jetstream.MsgIDHeader, headerOf[T])
}

// Header uses the first value of the named header as the id. NATS header
// names are case-sensitive, and so is name. A message without it fails with
// dedup.ErrNoKey.
func Header[T any](name string) dedup.KeyFunc[*Msg[T]] {
	return idstrategy.Header(name, headerOf[T])
}

// StreamSequence uses the stream name and stream sequence ("ORDERS:42") as
// the id: it catches JetStream's own redeliveries of one stored message, not
// a producer that published twice. A core NATS message fails with
// dedup.ErrNoKey.
func StreamSequence[T any]() dedup.KeyFunc[*Msg[T]] {
	return func(m *Msg[T]) (string, error) {
		if m.Stream == "" || m.Sequence == 0 {
			return "", noKey("stream sequence", "not a JetStream message")
		}
		return m.Stream + ":" + strconv.FormatUint(m.Sequence, 10), nil
	}
}

// ContentHash uses the SHA-256 of the data as the id ("sha256:..."): the same
// bytes published twice are one message. An empty body fails with
// dedup.ErrNoKey.
func ContentHash[T any]() dedup.KeyFunc[*Msg[T]] {
	return idstrategy.ContentHash(func(m *Msg[T]) ([]byte, error) { return m.Data, nil })
}

// BodyField uses a field of the decoded body as the id (an order number);
// name is used in error messages. An empty field fails with dedup.ErrNoKey.
func BodyField[T any](name string, get func(T) string) dedup.KeyFunc[*Msg[T]] {
	if get == nil {
		panic(wrapConfig("BodyField: get is nil (field %q)", name))
	}
	return idstrategy.Field(name, func(m *Msg[T]) string { return get(m.Body) })
}
