package dedupkafka

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

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
func originOf(m kafka.Message) origin {
	own := origin{topic: m.Topic, partition: m.Partition, offset: m.Offset}
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
	msg       kafka.Message
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
func (rl retryLetter) message(topic string) kafka.Message {
	h := make([]kafka.Header, 0, len(rl.msg.Headers)+9)
	for _, kv := range rl.msg.Headers {
		if !slices.Contains(managed, kv.Key) {
			h = append(h, kv)
		}
	}
	add := func(k, v string) { h = append(h, kafka.Header{Key: k, Value: []byte(v)}) }
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
	return kafka.Message{Topic: topic, Key: rl.msg.Key, Value: rl.msg.Value, Headers: h}
}

// writeRetry writes rl to topic and returns once all in-sync replicas
// acknowledged it.
func writeRetry(ctx context.Context, w *kafka.Writer, topic string, rl retryLetter) error {
	if err := w.WriteMessages(ctx, rl.message(topic)); err != nil {
		return fmt.Errorf("%w to %q: %w", ErrRetryWrite, topic, err)
	}
	return nil
}

// checkRetryTopics checks, for each topic read, that its retry topics
// exist and keep messages at least as long as their tier, and that the
// receiver keeps failed records (and their attempt counts) at least as long
// as the longest tier. It returns a description of the problem, or "".
func checkRetryTopics(ctx context.Context, client *kafka.Client, topics []string, tiers []time.Duration, retention time.Duration) string {
	longest := tiers[len(tiers)-1]
	if retention < longest {
		return fmt.Sprintf("the receiver keeps records for %v, less than the longest retry tier %v: a message back from its retry topic would find its attempt count gone and could be retried forever, or run again after it succeeded elsewhere; raise dedup.Config.Retention or shorten the tiers", retention, longest)
	}
	var names []string
	tierOf := map[string]time.Duration{}
	for _, t := range topics {
		base := retryBase(t, tiers)
		for _, tier := range tiers {
			name := adapter.RetryName(base, tier)
			if _, ok := tierOf[name]; !ok {
				names = append(names, name)
				tierOf[name] = tier
			}
		}
	}
	retentions, problem := describeTopics(ctx, client, "retry topic", names)
	if problem != "" {
		return problem
	}
	for _, name := range names {
		if r := retentions[name]; r >= 0 && r < tierOf[name] {
			return fmt.Sprintf("the retry topic %q keeps messages for %v, less than its tier %v: a message could be deleted before it is due", name, r, tierOf[name])
		}
	}
	return ""
}

// describeTopics returns the retention of each of the topics, which must
// exist, of the given kind ("retry topic", "dead-letter topic"). It returns
// a description of the problem, naming the topics, or "".
func describeTopics(ctx context.Context, client *kafka.Client, kind string, names []string) (map[string]time.Duration, string) {
	retentions, err := topicRetentions(ctx, client, names)
	if err != nil {
		quoted := make([]string, len(names))
		for i, n := range names {
			quoted[i] = strconv.Quote(n)
		}
		what := "the " + kind + " " + quoted[0] + " must exist (create it"
		if len(names) > 1 {
			what = "the " + kind + "s " + strings.Join(quoted, ", ") + " must exist (create them"
		}
		return nil, fmt.Sprintf("%s like the topics read; the Consumer creates no topic): %v", what, err)
	}
	for _, name := range names {
		if _, ok := retentions[name]; !ok {
			return nil, fmt.Sprintf("the %s %q did not answer with its retention.ms; create it", kind, name)
		}
	}
	return retentions, ""
}
