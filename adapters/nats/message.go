package dedupnats

import (
	"context"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The values of dedup.Message.Broker and delivery.Event.Broker for messages of
// this package, for an Observer that tells brokers apart.
const (
	BrokerJetStream = "jetstream"
	BrokerNATS      = "nats"
)

// NativeJetStream returns the JetStream message m was filled from, and
// false when m did not come from a [Consumer]. Read it (its metadata, its reply
// subject); do not Ack, Nak, Term or InProgress it: the Consumer settles
// every message after its outcome is recorded, and a second
// acknowledgement confuses the consumer's accounting.
func NativeJetStream[T any](m *dedup.Message[T]) (jetstream.Msg, bool) {
	if m == nil {
		return nil, false
	}
	msg, ok := m.Native.(jetstream.Msg)
	return msg, ok
}

// Native returns the core NATS message m was filled from, and false when m
// did not come from a [Subscriber] (one from a [Consumer] is
// [NativeJetStream]'s). Its Reply field is the reply subject of
// a request. Read it; do not Respond to it: the Subscriber replies to every
// request with the handler's result (or the stored one, for a duplicate).
func Native[T any](m *dedup.Message[T]) (*natsgo.Msg, bool) {
	if m == nil {
		return nil, false
	}
	msg, ok := m.Native.(*natsgo.Msg)
	return msg, ok && msg != nil
}

// header wraps NATS headers without copying them: nil when there are none,
// so that dedup.Message.Header is nil too.
func header(h natsgo.Header) delivery.Header {
	if len(h) == 0 {
		return nil
	}
	return delivery.MapHeader(h)
}

// jetStreamMessage is the envelope of a JetStream delivery. Its heartbeat is
// InProgress, so JetStream does not redeliver a message whose handler runs
// past AckWait while its lease is being extended.
func jetStreamMessage[T any](m jetstream.Msg, meta *jetstream.MsgMetadata, fingerprint bool) *dedup.Message[T] {
	h := m.Headers()
	return &dedup.Message[T]{
		Data:            m.Data(),
		Header:          header(h),
		ID:              h.Get(jetstream.MsgIDHeader),
		Source:          m.Subject(),
		Stream:          meta.Stream,
		Offset:          int64(meta.Sequence.Stream),
		DeliveryCount:   int(meta.NumDelivered),
		Redelivered:     meta.NumDelivered > 1,
		Timestamp:       meta.Timestamp,
		Broker:          BrokerJetStream,
		Native:          m,
		OnHeartbeat:     func(context.Context) error { return m.InProgress() },
		FingerprintData: fingerprint,
	}
}

// coreMessage is the envelope of a core NATS message: no stream, no
// delivery count (core NATS does not count), no heartbeat.
func coreMessage[T any](m *natsgo.Msg, fingerprint bool) *dedup.Message[T] {
	return &dedup.Message[T]{
		Data:            m.Data,
		Header:          header(m.Header),
		ID:              m.Header.Get(jetstream.MsgIDHeader),
		Source:          m.Subject,
		Broker:          BrokerNATS,
		Native:          m,
		FingerprintData: fingerprint,
	}
}
