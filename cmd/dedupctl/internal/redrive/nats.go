package redrive

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/delivery"
)

// NATSConfig says where a NATS source reads.
type NATSConfig struct {
	// URL is the server's, nats://host:4222 (several, comma-separated).
	URL string
	// Stream is the dead-letter stream.
	Stream string
	// Subject keeps only the letters of the stream on this subject
	// (wildcards allowed). Defaults to all of them.
	Subject string
	// Timeout bounds the connection.
	Timeout time.Duration
}

// NATS reads the dead letters of a JetStream stream by sequence, from the
// first to the last it held when the pass began, and removes one by
// deleting it from the stream (whatever the stream's retention). It reads
// with direct message gets rather than a consumer, so that a work-queue
// dead-letter stream with a consumer of its own can be redriven too.
type NATS struct {
	nc         *natsgo.Conn
	js         jetstream.JetStream
	stream     jetstream.Stream
	filter     string
	next, last uint64
	size       int64
}

var _ Source = (*NATS)(nil)

// natsLetter is what a NATS letter keeps for republishing and removal.
type natsLetter struct {
	msg *jetstream.RawStreamMsg
}

// NewNATS connects to cfg.URL and begins a pass over cfg.Stream. The error
// of an unreachable server names its address; one of a stream that does
// not exist matches ErrNotFound.
func NewNATS(ctx context.Context, cfg NATSConfig) (*NATS, error) {
	where := "NATS " + redactURL(cfg.URL)
	nc, err := natsgo.Connect(cfg.URL, natsgo.Name("dedupctl redrive"), natsgo.Timeout(cfg.Timeout),
		natsgo.MaxReconnects(0))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	s, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		nc.Close()
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			err = fmt.Errorf("%w: stream %q", ErrNotFound, cfg.Stream)
		}
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	state := s.CachedInfo().State
	n := &NATS{nc: nc, js: js, stream: s, filter: cmp.Or(cfg.Subject, ">"),
		next: state.FirstSeq, last: state.LastSeq, size: int64(state.Msgs)}
	if state.Msgs == 0 {
		n.next = n.last + 1
	}
	return n, nil
}

// Next reads the next letter at or after the last one read.
func (n *NATS) Next(ctx context.Context) (*Letter, error) {
	if n.next > n.last {
		return nil, ErrEnd
	}
	m, err := n.stream.GetMsg(ctx, n.next, jetstream.WithGetMsgSubject(n.filter))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, ErrEnd
	case err != nil:
		return nil, err
	case m.Sequence > n.last:
		// Dead-lettered after the pass began: the next run's.
		return nil, ErrEnd
	}
	n.next = m.Sequence + 1
	return natsLetterOf(m), nil
}

// natsLetterOf reads a letter's Dedup-* headers with delivery.LookupHeader,
// which also finds the names dedupnats wrote before 1.0 (Dedup-Subject,
// Dedup-Sequence, Dedup-Msg-Id...): letters dead-lettered then are still
// in their streams.
func natsLetterOf(m *jetstream.RawStreamMsg) *Letter {
	h := m.Header
	l := &Letter{
		ID:        strconv.FormatUint(m.Sequence, 10),
		Time:      m.Time,
		MessageID: lookupNATS(h, delivery.HeaderOriginalMessageID),
		Header: func(name string) (string, bool) {
			v := h.Values(name)
			return strings.Join(v, ","), len(v) > 0
		},
		Body:   m.Data,
		handle: natsLetter{msg: m},
	}
	l.Reason = lookupNATS(h, delivery.HeaderReason)
	if l.Reason == "" {
		return l
	}
	l.Marking = ByAdapter
	l.Key = lookupNATS(h, delivery.HeaderKey)
	l.Error = lookupNATS(h, delivery.HeaderError)
	l.Truncated = h.Get(dedupnats.HeaderTruncated)
	if subj := lookupNATS(h, delivery.HeaderSource); subj != "" {
		l.To = "subject " + subj
	}
	return l
}

// lookupNATS returns the dedup header name of h (delivery.LookupHeader:
// its name of 0.1 too), "" without it.
func lookupNATS(h natsgo.Header, name string) string {
	v, _ := delivery.LookupHeader(delivery.MapHeader(h), name)
	return v
}

// Republish publishes the original on its subject, into the stream it
// came from when it came from one, and waits for the stream's PubAck.
func (n *NATS) Republish(ctx context.Context, l *Letter) error {
	m := l.handle.(natsLetter).msg
	h := m.Header
	orig := &natsgo.Msg{Subject: lookupNATS(h, delivery.HeaderSource), Data: m.Data, Header: restoredNATSHeader(h)}
	var opts []jetstream.PublishOpt
	stream := lookupNATS(h, delivery.HeaderStream)
	if stream != "" {
		opts = append(opts, jetstream.WithExpectStream(stream))
	}
	ack, err := n.js.PublishMsg(ctx, orig, opts...)
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, natsgo.ErrNoResponders):
		return fmt.Errorf("%w: no stream captures subject %q (%w)", ErrRefused, orig.Subject, err)
	case errors.As(err, &apiErr):
		return fmt.Errorf("%w: %w", ErrRefused, err)
	case err != nil:
		return err
	}
	if ack.Duplicate && stream != "" && ack.Stream == stream && strconv.FormatUint(ack.Sequence, 10) == lookupNATS(h, delivery.HeaderOffset) {
		// The stream matched the copy with the original itself: the copy
		// was dropped. A match with another sequence is an earlier copy
		// (of a run that crashed before removing the letter): it is there.
		return fmt.Errorf("%w: stream %q still remembers Nats-Msg-Id %q of sequence %d in its duplicate window; redrive once the window has passed",
			ErrDuplicateWindow, stream, orig.Header.Get(jetstream.MsgIDHeader), ack.Sequence)
	}
	return nil
}

// restoredNATSHeader is the original's header: the letter's without the
// Dedup-* headers and without its own Nats-* ones (its Nats-Msg-Id and the
// expectation of the dead-letter stream), with the original's Nats-Msg-Id
// (Dedup-Original-Message-Id, or Dedup-Msg-Id on a letter of 0.1) and the
// Nats-* headers the adapter moved aside put back, but for those that
// held at the original's publish only: an expected last sequence or
// message id (long passed) and a rollup (which would purge the subject
// again).
func restoredNATSHeader(h natsgo.Header) natsgo.Header {
	out := natsgo.Header{}
	if id, ok := delivery.LookupHeader(delivery.MapHeader(h), delivery.HeaderOriginalMessageID); ok {
		out[jetstream.MsgIDHeader] = []string{id}
	}
	for k, vs := range h {
		name := k
		switch {
		case hasPrefixFold(k, dedupnats.HeaderOriginalPrefix+"Nats-"):
			name = k[len(dedupnats.HeaderOriginalPrefix):]
			if hasPrefixFold(name, "Nats-Expected-Last") || strings.EqualFold(name, "Nats-Rollup") {
				continue
			}
		case hasPrefixFold(k, "Dedup-"), hasPrefixFold(k, "Nats-"):
			continue
		}
		out[name] = append([]string(nil), vs...)
	}
	return out
}

// Remove deletes the letter from the stream.
func (n *NATS) Remove(ctx context.Context, l *Letter) error {
	err := n.stream.DeleteMsg(ctx, l.handle.(natsLetter).msg.Sequence)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // deleted meanwhile (a run beside this one)
	}
	return err
}

// Leave does nothing: the letter stays in the stream.
func (n *NATS) Leave(context.Context, *Letter) error { return nil }

// Size is how many messages the stream held when the pass began.
func (n *NATS) Size() int64 { return n.size }

// Close closes the connection.
func (n *NATS) Close(context.Context) error {
	n.nc.Close()
	return nil
}
