package dedupkafka

import (
	"iter"

	"github.com/segmentio/kafka-go"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
)

// BrokerKafka is the value of dedup.Message.Broker and delivery.Event.Broker
// for messages of this package.
const BrokerKafka = "kafka"

// Native returns the kafka-go message m was filled from, and false when m
// did not come from a [Consumer]. Read it (its Key, its HighWaterMark); do
// not commit it: the Consumer commits every partition up to the last
// message whose outcome is recorded, and a commit of yours could skip
// messages still being handled.
func Native[T any](m *dedup.Message[T]) (kafka.Message, bool) {
	if m == nil {
		return kafka.Message{}, false
	}
	msg, ok := m.Native.(kafka.Message)
	return msg, ok
}

// Header is a delivery.Header over kafka-go record headers, without copying
// them. Names match exactly, case included; values are the header bytes as
// a string. A name may appear more than once: Get returns the first.
type Header []kafka.Header

// Get returns the first value of the named header and whether it is present.
func (h Header) Get(name string) (string, bool) {
	for _, kv := range h {
		if kv.Key == name {
			return string(kv.Value), true
		}
	}
	return "", false
}

// All yields every header name and value, in the record's order.
func (h Header) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for _, kv := range h {
			if !yield(kv.Key, string(kv.Value)) {
				return
			}
		}
	}
}

var _ delivery.Header = Header(nil)

// envelope is the dedup.Message of a fetched kafka-go message. Kafka
// neither counts deliveries nor has message ids, so DeliveryCount is 0 and
// ID empty; key on a header ([HeaderMessageID], stamped by [Writer]), the
// record key ([MessageKey]) or the body.
func envelope[T any](m kafka.Message, fingerprint bool) *dedup.Message[T] {
	env := &dedup.Message[T]{
		Data:            m.Value,
		Source:          m.Topic,
		Stream:          m.Topic,
		Partition:       m.Partition,
		Offset:          m.Offset,
		Timestamp:       m.Time,
		Broker:          BrokerKafka,
		Native:          m,
		FingerprintData: fingerprint,
	}
	if len(m.Headers) > 0 {
		env.Header = Header(m.Headers)
	}
	return env
}

// retried makes env, the envelope of a message from a retry topic, say
// what it retries: Stream, Partition and Offset are where it was first
// read (so that a key on them, idstrategy.TopicPartitionOffset, is the
// same on every attempt), DeliveryCount the attempt it is on. Source stays
// the retry topic it was read from.
func retried[T any](env *dedup.Message[T], from origin) {
	env.Stream, env.Partition, env.Offset = from.topic, from.partition, from.offset
	env.DeliveryCount, env.Redelivered = from.attempt+1, true
}
