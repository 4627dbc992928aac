package nats

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/dedup-go/dedup"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers of a dead letter, added to the original message's headers.
const (
	HeaderReason        = "Dedup-Reason"         // the dedup.Reason, e.g. "undecodable"
	HeaderError         = "Dedup-Error"          // the error's text
	HeaderSubject       = "Dedup-Subject"        // the subject it was published on
	HeaderStream        = "Dedup-Stream"         // JetStream only
	HeaderConsumer      = "Dedup-Consumer"       // JetStream only
	HeaderSequence      = "Dedup-Sequence"       // stream sequence, JetStream only
	HeaderDeliveryCount = "Dedup-Delivery-Count" // JetStream only
	HeaderKey           = "Dedup-Key"            // the record's key, when it had one
	HeaderMsgID         = "Dedup-Msg-Id"         // the original Nats-Msg-Id, when it had one
	HeaderRetryAfter    = "Dedup-Retry-After"    // in replies asking to retry: milliseconds
)

// deadLetterer publishes dead letters.
type deadLetterer struct {
	subject string
	nc      *natsgo.Conn
	js      jetstream.JetStream
	stream  string // the stream capturing subject, found by resolve; "" for none
}

// resolve finds the stream that captures the dead-letter subject, if any:
// with one, publishes wait for its acknowledgement.
func (d *deadLetterer) resolve(ctx context.Context) error {
	name, err := d.js.StreamNameBySubject(ctx, d.subject)
	switch {
	case err == nil:
		d.stream = name
	case errors.Is(err, jetstream.ErrStreamNotFound), errors.Is(err, jetstream.ErrJetStreamNotEnabled),
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount), errors.Is(err, natsgo.ErrNoResponders):
		d.stream = ""
	default:
		return fmt.Errorf("dedupnats: find the stream of dead-letter subject %q: %w", d.subject, err)
	}
	return nil
}

// deadLetter is what a dead letter says.
type deadLetter struct {
	subject      string
	header       natsgo.Header
	data         []byte
	reason       dedup.Reason
	err          error
	key          string
	stream       string
	consumer     string
	sequence     uint64
	numDelivered uint64
}

// message builds the dead-letter message.
func (d *deadLetterer) message(dl deadLetter) *natsgo.Msg {
	m := natsgo.NewMsg(d.subject)
	m.Data = dl.data
	for k, vs := range dl.header {
		m.Header[k] = append([]string(nil), vs...)
	}
	// The original Nats-Msg-Id would make a stream capturing both subjects
	// drop the dead letter as a duplicate of the original; an id of its own
	// still lets the dead-letter stream drop a repeated dead letter.
	if id := m.Header.Get(jetstream.MsgIDHeader); id != "" {
		m.Header.Set(HeaderMsgID, id)
		m.Header.Del(jetstream.MsgIDHeader)
	}
	if dl.stream != "" {
		m.Header.Set(jetstream.MsgIDHeader, "dedup-dlq:"+dl.stream+":"+strconv.FormatUint(dl.sequence, 10))
	}
	m.Header.Set(HeaderReason, string(dl.reason))
	if dl.err != nil {
		m.Header.Set(HeaderError, oneLine(dl.err.Error()))
	}
	m.Header.Set(HeaderSubject, dl.subject)
	if dl.key != "" {
		m.Header.Set(HeaderKey, dl.key)
	}
	if dl.stream != "" {
		m.Header.Set(HeaderStream, dl.stream)
		m.Header.Set(HeaderConsumer, dl.consumer)
		m.Header.Set(HeaderSequence, strconv.FormatUint(dl.sequence, 10))
		m.Header.Set(HeaderDeliveryCount, strconv.FormatUint(dl.numDelivered, 10))
	}
	return m
}

// publish sends the dead letter. When a stream captures the subject, it
// waits for the stream's acknowledgement; otherwise it publishes on core
// NATS and flushes, which is all core NATS offers.
func (d *deadLetterer) publish(ctx context.Context, dl deadLetter) error {
	m := d.message(dl)
	var err error
	if d.stream != "" {
		_, err = d.js.PublishMsg(ctx, m, jetstream.WithExpectStream(d.stream))
	} else {
		m.Header.Del(jetstream.MsgIDHeader)
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
