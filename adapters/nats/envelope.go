package nats

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/dedup-go/dedup"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Msg is what the receiver sees: the broker's metadata and the decoded body
// side by side, so a key strategy can use either without decoding twice.
// Stream, Consumer, Sequence, NumDelivered and Timestamp are set for
// JetStream messages only.
//
// A *Msg implements dedup.Heartbeater: while a handler runs longer than a
// third of the receiver's lease, each lease extension also tells JetStream
// the message is in progress, so it is not redelivered meanwhile. It
// implements dedup.Fingerprinter too, returning a fingerprint only when
// Options.Fingerprint is set.
type Msg[T any] struct {
	// Subject is the subject the message was published on.
	Subject string
	// Reply is the reply subject of a core NATS request; empty otherwise.
	Reply string
	// Header holds the message's headers (nil when it has none).
	Header natsgo.Header
	// Data is the body as published.
	Data []byte
	// Body is Data decoded by the Decoder.
	Body T

	// Stream is the JetStream stream the message came from.
	Stream string
	// Consumer is the JetStream consumer that delivered it.
	Consumer string
	// Sequence is the message's stream sequence.
	Sequence uint64
	// NumDelivered is how many times JetStream has delivered it, this
	// delivery included.
	NumDelivered uint64
	// Timestamp is when the stream stored it.
	Timestamp time.Time

	js          jetstream.Msg
	core        *natsgo.Msg
	fingerprint bool
}

// JetStream returns the underlying JetStream message, or nil for a core
// NATS message. Do not acknowledge it: the adapter does, after the outcome
// is recorded.
func (m *Msg[T]) JetStream() jetstream.Msg { return m.js }

// Core returns the underlying core NATS message, or nil for a JetStream
// message. Do not respond to it: the adapter does.
func (m *Msg[T]) Core() *natsgo.Msg { return m.core }

// Heartbeat tells JetStream that the message is still being worked on
// (InProgress), resetting its AckWait. For a core message it does nothing.
func (m *Msg[T]) Heartbeat(context.Context) error {
	if m.js == nil {
		return nil
	}
	return m.js.InProgress()
}

// Fingerprint returns "sha256:" and the hex SHA-256 of Data when
// Options.Fingerprint is set, and "" (no fingerprint) otherwise.
func (m *Msg[T]) Fingerprint() (string, error) {
	if !m.fingerprint {
		return "", nil
	}
	sum := sha256.Sum256(m.Data)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// Compile-time checks.
var (
	_ dedup.Heartbeater   = (*Msg[struct{}])(nil)
	_ dedup.Fingerprinter = (*Msg[struct{}])(nil)
)
