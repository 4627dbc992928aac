package dedupkafka

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/dedup-go/dedup/delivery"
	"github.com/segmentio/kafka-go"
)

// Headers of a dead letter, added to the original message's headers.
const (
	HeaderReason       = "Dedup-Reason"        // the delivery.Reason, e.g. "undecodable"
	HeaderError        = "Dedup-Error"         // the error's text, on one line
	HeaderTopic        = "Dedup-Topic"         // the original's topic
	HeaderPartition    = "Dedup-Partition"     // the original's partition
	HeaderOffset       = "Dedup-Offset"        // the original's offset
	HeaderGroup        = "Dedup-Group"         // the consumer group
	HeaderKey          = "Dedup-Key"           // the record's key in the store, when it had one
	HeaderAttempt      = "Dedup-Attempt"       // the attempt that ended it (0 when no claim was made)
	HeaderFirstFailure = "Dedup-First-Failure" // RFC 3339 time of the first failure seen by this consumer
	HeaderOriginalID   = "Dedup-Message-Id"    // the original's HeaderMessageID, when it had one
)

// deadLetter is what a dead letter says.
type deadLetter struct {
	msg       kafka.Message
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
func (dl deadLetter) message(topic string) kafka.Message {
	h := make([]kafka.Header, 0, len(dl.msg.Headers)+10)
	for _, kv := range dl.msg.Headers {
		if slices.Contains(managed, kv.Key) {
			continue // a retry message's: the dead letter says its own
		}
		if kv.Key == HeaderMessageID {
			// The dead letter has an id of its own; the original's is kept.
			h = append(h, kafka.Header{Key: HeaderOriginalID, Value: kv.Value})
			continue
		}
		h = append(h, kv)
	}
	add := func(k, v string) { h = append(h, kafka.Header{Key: k, Value: []byte(v)}) }
	add(HeaderMessageID, deadLetterID(dl.from))
	add(HeaderReason, string(dl.reason))
	if dl.err != nil {
		add(HeaderError, oneLine(dl.err.Error()))
	}
	add(HeaderTopic, dl.from.topic)
	add(HeaderPartition, strconv.Itoa(dl.from.partition))
	add(HeaderOffset, strconv.FormatInt(dl.from.offset, 10))
	add(HeaderGroup, dl.group)
	if dl.key != "" {
		add(HeaderKey, dl.key)
	}
	add(HeaderAttempt, strconv.Itoa(dl.attempt))
	if !dl.firstFail.IsZero() {
		add(HeaderFirstFailure, dl.firstFail.UTC().Format(time.RFC3339Nano))
	}
	if dl.trace != nil {
		dl.trace(func(k, v string) { h = setHeader(h, k, v) })
	}
	return kafka.Message{Topic: topic, Key: dl.msg.Key, Value: dl.msg.Value, Headers: h}
}

// writeDeadLetter writes dl to the dead-letter topic and returns once all
// in-sync replicas acknowledged it.
func writeDeadLetter(ctx context.Context, w *kafka.Writer, topic string, dl deadLetter) error {
	if err := w.WriteMessages(ctx, dl.message(topic)); err != nil {
		return fmt.Errorf("%w to %q: %w", ErrDeadLetter, topic, err)
	}
	return nil
}

// setHeader sets the header k of h to v: the first header named k takes
// the value and any later one is dropped (a trace context of the
// original's, say, which the one written now replaces), or, without one,
// the header is added. h must be the caller's own slice.
func setHeader(h []kafka.Header, k, v string) []kafka.Header {
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
		out = append(out, kafka.Header{Key: k, Value: []byte(v)})
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
