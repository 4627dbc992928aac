package dedupfranz

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
)

// HeaderNotBefore is the header of a message in a retry topic that says
// when it may be handled again (RFC 3339, UTC). A Consumer waits until then
// before handing a message that carries it to the receiver. A retry copy
// also carries delivery.HeaderSource (the topic the failed delivery was
// read from), delivery.HeaderStream, HeaderPartition and HeaderOffset
// (where the message was first read), HeaderAttempt (the attempt that
// failed), [HeaderFirstFailure], HeaderReason, HeaderError and
// HeaderConsumerGroup, beside the original key, value and headers (its
// Message-Id included). Retry topics are named by adapter.RetryName.
const HeaderNotBefore = "Dedup-Not-Before"

// retryBase returns the topic whose retry topic topic is (for one of
// tiers), or topic itself when it is none.
func retryBase(topic string, tiers []time.Duration) string {
	for _, t := range tiers {
		if base, ok := strings.CutSuffix(topic, adapter.RetryName("", t)); ok && base != "" {
			return base
		}
	}
	return topic
}

// origin is where a message was first read, and what its earlier attempts
// came to: the message's own position for a message of the original topic,
// the one its headers carry for a message of a retry topic.
type origin struct {
	topic     string
	partition int
	offset    int64
	attempt   int       // the attempt that failed before the message was sent to a retry topic; 0 for none
	firstFail time.Time // zero for none
	notBefore time.Time // zero for a message not from a retry topic, or one whose HeaderNotBefore is unreadable
	retry     bool      // m came from a retry topic: it has a HeaderNotBefore
}

// originOf reads m's origin. A message without a valid HeaderNotBefore is
// not a retry message (a dead letter replayed into its topic, say, carries
// delivery.HeaderStream but no HeaderNotBefore), and is its own origin.
//
// The headers are read with delivery.LookupHeader, which also finds the
// names of 0.1: a retry copy written by 0.1 (Dedup-Topic for the original
// topic) waiting in its retry topic is read as one written now. The
// original topic is HeaderStream, or, on a copy of 0.1, HeaderSource
// (Dedup-Topic named the original topic).
func originOf(m *kgo.Record) origin {
	own := origin{topic: m.Topic, partition: int(m.Partition), offset: m.Offset}
	h := Header(m.Headers)
	nb, ok := delivery.LookupHeader(h, HeaderNotBefore)
	if !ok {
		return own
	}
	o := own
	o.retry = true
	var err error
	if o.notBefore, err = time.Parse(time.RFC3339Nano, nb); err != nil {
		// Handled at once rather than lost; the other headers still say
		// where it came from if they can.
		o.notBefore = time.Time{}
	}
	topic, okT := delivery.LookupHeader(h, delivery.HeaderStream)
	if !okT {
		topic, okT = delivery.LookupHeader(h, delivery.HeaderSource)
	}
	part, errP := atoiHeader(h, delivery.HeaderPartition)
	off, errO := strconv.ParseInt(headerOr(h, delivery.HeaderOffset), 10, 64)
	if !okT || topic == "" || errP != nil || errO != nil || part < 0 || off < 0 {
		return o
	}
	o.topic, o.partition, o.offset = topic, part, off
	if a, err := atoiHeader(h, delivery.HeaderAttempt); err == nil && a > 0 {
		o.attempt = a
	}
	if ff, ok := delivery.LookupHeader(h, HeaderFirstFailure); ok {
		if t, err := time.Parse(time.RFC3339Nano, ff); err == nil {
			o.firstFail = t
		}
	}
	return o
}

// headerOr returns the named header of h (delivery.LookupHeader), or "".
func headerOr(h Header, name string) string {
	v, _ := delivery.LookupHeader(h, name)
	return v
}

func atoiHeader(h Header, name string) (int, error) {
	return strconv.Atoi(headerOr(h, name))
}

// tierFor returns the retry tier of a Retry decision: the smallest tier at
// least d's delay, or the largest. It reports false when d is retried in
// place: no tiers, a delay shorter than the smallest tier, or a reason
// other than a handler error (a message in flight elsewhere is looked at
// again in place, soon at first: its holder may finish in milliseconds; a
// store that is down holds the whole partition back on purpose; and a
// shutdown leaves the message for the next owner).
func tierFor(tiers []time.Duration, d delivery.Decision) (time.Duration, bool) {
	if len(tiers) == 0 || d.Action != delivery.Retry || d.Reason != delivery.ReasonHandlerError || d.Delay < tiers[0] {
		return 0, false
	}
	for _, t := range tiers {
		if t >= d.Delay {
			return t, true
		}
	}
	return tiers[len(tiers)-1], true
}

// managed are the headers this package sets on dead letters and retry
// messages, and the names of 0.1 of some of them. A copy of a message that
// already has them (a retry message dead-lettered or retried again) drops
// the old values first, so that Header.Get finds the new ones.
var managed = []string{
	delivery.HeaderReason, delivery.HeaderError, delivery.HeaderSource, delivery.HeaderStream,
	delivery.HeaderPartition, delivery.HeaderOffset, delivery.HeaderConsumerGroup,
	delivery.HeaderKey, delivery.HeaderAttempt, HeaderFirstFailure, HeaderNotBefore,
	formerHeaderTopic, formerHeaderGroup,
}

// retryLetter is what a retry message says.
type retryLetter struct {
	msg       *kgo.Record
	from      origin
	group     string
	reason    delivery.Reason
	err       error
	attempt   int
	firstFail time.Time
	notBefore time.Time
	trace     func(set func(key, value string)) // writes the delivery's trace context; nil for none
}

// message builds the retry message: the original key, value and headers
// (its Message-Id too, so that a receiver keyed on it counts the attempts
// of one message), with the Dedup-* headers after them.
func (rl retryLetter) message(topic string) *kgo.Record {
	h := make([]kgo.RecordHeader, 0, len(rl.msg.Headers)+9)
	for _, kv := range rl.msg.Headers {
		if !slices.Contains(managed, kv.Key) {
			h = append(h, kv)
		}
	}
	add := func(k, v string) { h = append(h, kgo.RecordHeader{Key: k, Value: []byte(v)}) }
	add(delivery.HeaderReason, string(rl.reason))
	if rl.err != nil {
		add(delivery.HeaderError, oneLine(rl.err.Error()))
	}
	addOrigin(add, rl.msg.Topic, rl.from, rl.group)
	add(delivery.HeaderAttempt, strconv.Itoa(rl.attempt))
	if !rl.firstFail.IsZero() {
		add(HeaderFirstFailure, rl.firstFail.UTC().Format(time.RFC3339Nano))
	}
	add(HeaderNotBefore, rl.notBefore.UTC().Format(time.RFC3339Nano))
	if rl.trace != nil {
		rl.trace(func(k, v string) { h = setHeader(h, k, v) })
	}
	return &kgo.Record{Topic: topic, Key: rl.msg.Key, Value: rl.msg.Value, Headers: h}
}

// writeRetry writes rl to topic and returns once all in-sync replicas
// acknowledged it.
func writeRetry(ctx context.Context, cl *kgo.Client, topic string, rl retryLetter) error {
	if err := cl.ProduceSync(ctx, rl.message(topic)).FirstErr(); err != nil {
		return fmt.Errorf("%w to %q: %w", ErrRetryWrite, topic, err)
	}
	return nil
}
