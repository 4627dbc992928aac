package dedupfranz

import (
	"iter"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
)

// BrokerKafka is the value of dedup.Message.Broker and delivery.Event.Broker
// for messages of this package: the broker is Kafka, whichever client reads
// it (dedupkafka's messages say the same).
const BrokerKafka = "kafka"

// Native returns the franz-go record m was filled from, and false when m
// did not come from a [Consumer]. Read it (its Key, its LeaderEpoch); do
// not commit it: the Consumer commits every partition up to the last
// record whose outcome is recorded, and a commit of yours could skip
// records still being handled.
func Native[T any](m *dedup.Message[T]) (*kgo.Record, bool) {
	if m == nil {
		return nil, false
	}
	r, ok := m.Native.(*kgo.Record)
	return r, ok && r != nil
}

// Header is a delivery.Header over franz-go record headers, without
// copying them. Names match exactly, case included; values are the header
// bytes as a string. A name may appear more than once: Get returns the
// first.
type Header []kgo.RecordHeader

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

// envelope is the dedup.Message of a fetched record. Kafka neither counts
// deliveries nor has message ids, so DeliveryCount is 0 and ID empty; key
// on a header ([HeaderMessageID], stamped by [StampMessageID]), the record
// key ([MessageKey]) or the body.
func envelope[T any](r *kgo.Record, fingerprint bool) *dedup.Message[T] {
	env := &dedup.Message[T]{
		Data:            r.Value,
		Source:          r.Topic,
		Stream:          r.Topic,
		Partition:       int(r.Partition),
		Offset:          r.Offset,
		Timestamp:       r.Timestamp,
		Broker:          BrokerKafka,
		Native:          r,
		FingerprintData: fingerprint,
	}
	if len(r.Headers) > 0 {
		env.Header = Header(r.Headers)
	}
	return env
}

// retried makes env, the envelope of a record from a retry topic, say
// what it retries: Stream, Partition and Offset are where it was first
// read (so that a key on them, idstrategy.TopicPartitionOffset, is the
// same on every attempt), DeliveryCount the attempt it is on. Source stays
// the retry topic it was read from.
func retried[T any](env *dedup.Message[T], from origin) {
	env.Stream, env.Partition, env.Offset = from.topic, from.partition, from.offset
	env.DeliveryCount, env.Redelivered = from.attempt+1, true
}
