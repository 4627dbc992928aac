package dedupfranz

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/dedup-go/dedup/delivery"
	"github.com/twmb/franz-go/pkg/kgo"
)

// HeaderFirstFailure is the header of a dead letter and of a retry copy
// that says when this consumer first saw the message fail (RFC 3339, UTC):
// a retry copy carries it to its next attempt and to its dead letter.
// Kafka alone has it; the other headers of dead letters and retry copies
// are the delivery.Header* names every adapter shares (see the package
// documentation).
const HeaderFirstFailure = "Dedup-First-Failure"

// The names of 0.1 of the headers a retry copy carries that now have a
// delivery.Header* name (delivery.LookupHeader reads them too): a copy
// made of a message that carries them (a retry copy written by 0.1) drops
// them, so that the copy says one thing under one name.
const (
	formerHeaderTopic = "Dedup-Topic" // delivery.HeaderSource and HeaderStream
	formerHeaderGroup = "Dedup-Group" // delivery.HeaderConsumerGroup
)

// deadLetter is what a dead letter says.
type deadLetter struct {
	msg       *kgo.Record
	from      origin // where msg was first read
	group     string
	reason    delivery.Reason
	err       error
	key       string
	attempt   int
	firstFail time.Time
	trace     func(set func(key, value string)) // writes the delivery's trace context; nil for none
}

// deadLetterID is the dead letter's HeaderMessageID: the original's
// position (where it was first read, for a message of a retry topic), the
// same whichever consumer writes it, so that a dead letter written twice
// (its original's commit was lost) is recognisable downstream.
func deadLetterID(from origin) string {
	return "dedup-dlq:" + from.topic + ":" + strconv.Itoa(from.partition) + ":" + strconv.FormatInt(from.offset, 10)
}

// message builds the dead-letter message: the original key (so that a
// keyed dead-letter topic keeps an entity's letters together), value and
// headers, with the Dedup-* headers after them.
func (dl deadLetter) message(topic string) *kgo.Record {
	h := make([]kgo.RecordHeader, 0, len(dl.msg.Headers)+10)
	for _, kv := range dl.msg.Headers {
		if slices.Contains(managed, kv.Key) {
			continue // a retry message's: the dead letter says its own
		}
		if kv.Key == HeaderMessageID {
			// The dead letter has an id of its own; the original's is kept.
			h = append(h, kgo.RecordHeader{Key: delivery.HeaderOriginalMessageID, Value: kv.Value})
			continue
		}
		h = append(h, kv)
	}
	add := func(k, v string) { h = append(h, kgo.RecordHeader{Key: k, Value: []byte(v)}) }
	add(HeaderMessageID, deadLetterID(dl.from))
	add(delivery.HeaderReason, string(dl.reason))
	if dl.err != nil {
		add(delivery.HeaderError, oneLine(dl.err.Error()))
	}
	addOrigin(add, dl.msg.Topic, dl.from, dl.group)
	if dl.key != "" {
		add(delivery.HeaderKey, dl.key)
	}
	add(delivery.HeaderAttempt, strconv.Itoa(dl.attempt))
	if !dl.firstFail.IsZero() {
		add(HeaderFirstFailure, dl.firstFail.UTC().Format(time.RFC3339Nano))
	}
	if dl.trace != nil {
		dl.trace(func(k, v string) { h = setHeader(h, k, v) })
	}
	return &kgo.Record{Topic: topic, Key: dl.msg.Key, Value: dl.msg.Value, Headers: h}
}

// addOrigin adds the headers that say where a message was consumed from
// (delivery.HeaderSource: source, the topic it was read from, a retry
// topic for a retry copy) and where it is in its log (HeaderStream,
// HeaderPartition, HeaderOffset: where it was first read), and by which
// consumer group (HeaderConsumerGroup).
func addOrigin(add func(k, v string), source string, from origin, group string) {
	add(delivery.HeaderSource, source)
	add(delivery.HeaderStream, from.topic)
	add(delivery.HeaderPartition, strconv.Itoa(from.partition))
	add(delivery.HeaderOffset, strconv.FormatInt(from.offset, 10))
	add(delivery.HeaderConsumerGroup, group)
}

// writeDeadLetter writes dl to the dead-letter topic and returns once all
// in-sync replicas acknowledged it.
func writeDeadLetter(ctx context.Context, cl *kgo.Client, topic string, dl deadLetter) error {
	if err := cl.ProduceSync(ctx, dl.message(topic)).FirstErr(); err != nil {
		return fmt.Errorf("%w to %q: %w", ErrDeadLetter, topic, err)
	}
	return nil
}

// setHeader sets the header k of h to v: the first header named k takes
// the value and any later one is dropped (a trace context of the
// original's, say, which the one written now replaces), or, without one,
// the header is added. h must be the caller's own slice.
func setHeader(h []kgo.RecordHeader, k, v string) []kgo.RecordHeader {
	out := h[:0]
	set := false
	for _, kv := range h {
		if kv.Key == k {
			if set {
				continue
			}
			kv.Value, set = []byte(v), true
		}
		out = append(out, kv)
	}
	if !set {
		out = append(out, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return out
}

// oneLine keeps a header value on one line and bounded: a panic's stack
// does not belong in a header.
func oneLine(s string) string {
	const limit = 1024
	out := make([]byte, 0, min(len(s), limit))
	for i := 0; i < len(s) && len(out) < limit; i++ {
		c := s[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		out = append(out, c)
	}
	return string(out)
}
