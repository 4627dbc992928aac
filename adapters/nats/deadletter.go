package dedupnats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/dedup-go/dedup/delivery"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// HeaderTruncated is set on a dead letter cut to fit the server's max
// payload or the dead-letter stream's MaxMsgSize, a header only NATS
// dead letters have (the others are package delivery's): what was cut, and
// why. The original of such a letter is lost; dedupctl redrive never
// republishes it.
const HeaderTruncated = "Dedup-Truncated"

// headerOriginalSize is the original data's size in bytes, on a cut dead
// letter.
const headerOriginalSize = "Dedup-Original-Size"

// HeaderOriginalPrefix prefixes the original's other Nats-* headers in a
// dead letter (Nats-Expected-Last-Sequence becomes
// Dedup-Original-Nats-Expected-Last-Sequence): the server acts on Nats-*
// headers when a message is published (expectations, rollups, TTLs), and
// the dead-letter stream would refuse or misfile the dead letter.
const HeaderOriginalPrefix = "Dedup-Original-"

// deadLetterer publishes dead letters.
type deadLetterer struct {
	subject string
	nc      *natsgo.Conn
	js      jetstream.JetStream
	stats   *counters
	stream  string // the stream capturing subject, found by resolve; "" for core NATS
	maxSize int    // the largest dead letter, headers included, the server and that stream take
	// origin tells this incarnation of the consumer's stream apart from a
	// deleted and recreated one of the same name (its creation time), so
	// that dead-letter ids never collide across them.
	origin string
}

// resolve finds the stream that captures the dead-letter subject and the
// size a dead letter may have. source is the consumer's stream ("" for a
// core subscription), which must not capture it; without a capturing
// stream, Start fails unless core dead letters are allowed.
func (d *deadLetterer) resolve(ctx context.Context, source string, allowCore bool, logger *slog.Logger) error {
	d.maxSize = int(d.nc.MaxPayload())
	name, err := d.js.StreamNameBySubject(ctx, d.subject)
	switch {
	case err == nil:
	case errors.Is(err, jetstream.ErrStreamNotFound), errors.Is(err, jetstream.ErrJetStreamNotEnabled),
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount), errors.Is(err, natsgo.ErrNoResponders):
		if !allowCore {
			return &configError{sentinel: ErrDeadLetterStream, msg: fmt.Sprintf("dedupnats: no stream captures dead-letter subject %q: "+
				"dead letters would go out on core NATS to whoever listens at that moment, and be lost otherwise; "+
				"create a stream for it, or set Options.CoreDeadLetters", d.subject)}
		}
		logger.WarnContext(ctx, "dedupnats: no stream captures the dead-letter subject; dead letters go out on core NATS and are lost if nobody listens",
			slog.String("subject", d.subject))
		d.stream = ""
		return nil
	default:
		return fmt.Errorf("dedupnats: find the stream of dead-letter subject %q: %w", d.subject, err)
	}
	if name == source {
		return &configError{sentinel: ErrDeadLetterStream, msg: fmt.Sprintf("dedupnats: stream %q captures both the consumer's messages and dead-letter subject %q: "+
			"the consumer would read its own dead letters back; give the dead letters a stream of their own", source, d.subject)}
	}
	s, err := d.js.Stream(ctx, name)
	if err != nil {
		return fmt.Errorf("dedupnats: dead-letter stream %q: %w", name, err)
	}
	if limit := int(s.CachedInfo().Config.MaxMsgSize); limit > 0 {
		d.maxSize = min(d.maxSize, limit)
	}
	d.stream = name
	return nil
}

// deadLetter is what a dead letter says.
type deadLetter struct {
	subject      string
	header       natsgo.Header
	data         []byte
	reason       delivery.Reason
	err          error
	key          string
	stream       string
	consumer     string
	sequence     uint64
	numDelivered uint64
	// inject writes the delivery's trace context into the dead letter's
	// headers (the receiver's delivery.Injector); nil for none.
	inject func(set func(key, value string))
}

// message builds the dead-letter message, cut to fit d.maxSize.
func (d *deadLetterer) message(dl deadLetter) *natsgo.Msg {
	m := natsgo.NewMsg(d.subject)
	m.Data = dl.data
	for k, vs := range dl.header {
		m.Header[movedAside(k)] = append([]string(nil), vs...)
	}
	// The delivery's trace context replaces the producer's (a traceparent
	// of the original): whoever reads the dead letter continues this
	// delivery's trace, which links to the producer's.
	var traced []string
	if dl.inject != nil {
		dl.inject(func(k, v string) {
			m.Header.Set(k, v)
			traced = append(traced, k)
		})
	}
	if d.stream != "" {
		// What jetstream.WithExpectStream would add after fit: the stream
		// refuses a dead letter that another stream would capture.
		m.Header.Set(jetstream.ExpectedStreamHeader, d.stream)
	}
	if dl.stream != "" && d.stream != "" {
		// An id of its own lets the dead-letter stream drop a repeated dead
		// letter (one published, then the Term lost), and no other.
		m.Header.Set(jetstream.MsgIDHeader, "dedup-dlq:"+dl.stream+":"+d.origin+":"+dl.consumer+":"+strconv.FormatUint(dl.sequence, 10))
	}
	m.Header.Set(delivery.HeaderReason, string(dl.reason))
	if dl.err != nil {
		m.Header.Set(delivery.HeaderError, oneLine(dl.err.Error()))
	}
	m.Header.Set(delivery.HeaderSource, dl.subject)
	if dl.key != "" {
		m.Header.Set(delivery.HeaderKey, oneLine(dl.key))
	}
	if dl.stream != "" {
		m.Header.Set(delivery.HeaderStream, dl.stream)
		m.Header.Set(delivery.HeaderConsumerGroup, dl.consumer)
		m.Header.Set(delivery.HeaderOffset, strconv.FormatUint(dl.sequence, 10))
		m.Header.Set(delivery.HeaderDeliveryCount, strconv.FormatUint(dl.numDelivered, 10))
	}
	d.fit(m, traced)
	return m
}

// movedAside renames the server's Nats-* headers of the original, which
// would act on the dead letter's publish: Nats-Msg-Id (the dead letter
// would be dropped as a duplicate of the original), Nats-Expected-* (the
// dead-letter stream would refuse it), Nats-Rollup, Nats-TTL and the rest.
func movedAside(name string) string {
	switch {
	case strings.EqualFold(name, jetstream.MsgIDHeader):
		return delivery.HeaderOriginalMessageID
	case len(name) >= 5 && strings.EqualFold(name[:5], "Nats-"):
		return HeaderOriginalPrefix + name
	}
	return name
}

// fit cuts m to d.maxSize: the data first, then, if the headers alone are
// too large, the original headers (not the trace context headers, keep),
// saying so in Dedup-Truncated and Dedup-Original-Size. A dead letter the server would refuse as too large
// would be Nak'd on every delivery, and lost at MaxDeliver.
func (d *deadLetterer) fit(m *natsgo.Msg, keep []string) {
	if d.maxSize <= 0 || headerSize(m.Header)+len(m.Data) <= d.maxSize {
		return
	}
	size := len(m.Data)
	m.Header.Set(headerOriginalSize, strconv.Itoa(size))
	m.Header.Set(HeaderTruncated, fmt.Sprintf("data cut from %d bytes to fit the %d-byte limit of %q", size, d.maxSize, d.subject))
	if room := d.maxSize - headerSize(m.Header); room >= 0 {
		m.Data = m.Data[:min(room, size)]
	} else {
		for k := range m.Header {
			if !strings.HasPrefix(k, "Dedup-") && k != jetstream.MsgIDHeader && !slices.Contains(keep, k) {
				delete(m.Header, k)
			}
		}
		m.Header.Set(HeaderTruncated, fmt.Sprintf("data and original headers cut to fit the %d-byte limit of %q", d.maxSize, d.subject))
		m.Data = m.Data[:max(0, min(d.maxSize-headerSize(m.Header), size))]
	}
	if d.stats != nil {
		d.stats.truncated.Add(1)
	}
}

// headerSize is the size of h on the wire (NATS/1.0, one line per value,
// a blank line), which counts against the max payload with the data.
func headerSize(h natsgo.Header) int {
	n := len("NATS/1.0\r\n") + len("\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}

// publish sends the dead letter. When a stream captures the subject, it
// waits for the stream's acknowledgement; otherwise it publishes on core
// NATS and flushes, which is all core NATS offers.
func (d *deadLetterer) publish(ctx context.Context, dl deadLetter) error {
	m := d.message(dl)
	var err error
	if d.stream != "" {
		_, err = d.js.PublishMsg(ctx, m) // m expects d.stream

	} else {
		m.Header.Del(jetstream.MsgIDHeader)
		m.Header.Del(jetstream.ExpectedStreamHeader)
		if err = d.nc.PublishMsg(m); err == nil {
			err = d.nc.FlushWithContext(ctx)
		}
	}
	if err != nil {
		return fmt.Errorf("%w to %q: %w", ErrDeadLetter, d.subject, err)
	}
	return nil
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
