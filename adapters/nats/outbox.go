package dedupnats

import (
	"context"
	"errors"
	"fmt"
	"sync"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dedup-go/dedup/outbox"
)

// Errors of the OutboxPublisher.
var (
	// ErrInvalidSubject: an outbox message's Destination is not a subject
	// a message can be published to (empty, a wildcard, whitespace). The
	// OutboxPublisher's error for it matches outbox.ErrPermanent too.
	ErrInvalidSubject = errors.New("dedupnats: invalid subject")
	// ErrPublisherClosed: Publish or PublishEach was called after Close.
	ErrPublisherClosed = errors.New("dedupnats: outbox publisher closed")
)

// OutboxOptions configures an OutboxPublisher. A nil *OutboxOptions means
// all defaults.
type OutboxOptions struct {
	// ExpectStream makes each publish fail unless the stream that stores
	// it has this name (the Nats-Expected-Stream header): a subject
	// captured by a stream other than the one meant is refused rather than
	// stored where no consumer reads it. Defaults to "": any stream.
	ExpectStream string
}

// OutboxPublisher is the outbox.Publisher of JetStream: each message is
// published to the subject its Destination names, with its ID in the
// Nats-Msg-Id header (so the stream's duplicate window drops a copy the
// relay publishes again, and the next consumer's idstrategy.MessageID
// finds it) and its Header as NATS headers, and counts as acknowledged
// once the stream's PubAck arrived (a PubAck of a duplicate included: the
// stream holds the message). The messages of one Publish are published at
// once (PublishMsgAsync), then their PubAcks awaited. It is an
// outbox.AckPublisher: PublishEach reports each message as its PubAck
// arrives, so that a pgoutbox relay publishes a key's next message
// without waiting for the rest of the call. The OrderingKey is
// not sent: JetStream keeps the order in which a connection's messages
// arrive, and the relay publishes a key's next message only after the
// previous one's PubAck.
//
// A message JetStream refuses for good fails with an error matching
// outbox.ErrPermanent, which the relay sets aside: a Destination that is
// not a subject (ErrInvalidSubject), a message over the server's
// max_payload (natsgo.ErrMaxPayload) or over the stream's max_msg_size
// (jetstream.ErrStreamMessageExceedsMaximum). Every other failure is
// tried again: a subject no stream captures (no responders) ends once a
// stream captures it, a wrong ExpectStream once the streams are fixed.
//
// The JetStream context and its connection stay the caller's: Close
// closes neither. Its WithPublishAsyncMaxPending bounds how many messages
// are in flight; a pgoutbox relay has at most 1,024 in flight, under its
// default of 4,000.
type OutboxPublisher struct {
	js           jetstream.JetStream
	expectStream []string // the Nats-Expected-Stream header's value, or nil

	mu       sync.Mutex
	closed   bool
	inFlight int           // Publish and PublishEach calls running
	idle     chan struct{} // made by Close, closed once inFlight is 0
}

var _ outbox.AckPublisher = (*OutboxPublisher)(nil)

// NewOutboxPublisher returns an OutboxPublisher on js; opts may be nil.
func NewOutboxPublisher(js jetstream.JetStream, opts *OutboxOptions) (*OutboxPublisher, error) {
	if js == nil {
		return nil, wrapConfig("JetStream is nil")
	}
	p := &OutboxPublisher{js: js}
	if opts != nil && opts.ExpectStream != "" {
		p.expectStream = []string{opts.ExpectStream}
	}
	return p, nil
}

// Publish publishes msgs and waits for their PubAcks (see outbox.Publisher).
// A message whose subject is invalid fails alone, with ErrInvalidSubject
// (and outbox.ErrPermanent), without being published.
func (p *OutboxPublisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	if err := p.begin(); err != nil {
		return err
	}
	defer p.end()
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	errs := make([]error, len(msgs))
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		futures[i], errs[i] = p.publishAsync(m)
	}
	failed := false
	for i, f := range futures {
		if f != nil {
			errs[i] = awaitAck(ctx, f)
		}
		failed = failed || errs[i] != nil
	}
	if !failed {
		return nil
	}
	return &outbox.BatchError{Errs: errs}
}

// PublishEach publishes msgs and reports each message as its PubAck
// arrives (see outbox.AckPublisher): it publishes them all, then awaits
// their PubAcks in the order published, which is the order JetStream
// answers a connection's messages in (a message is reported once those
// published before it in the call were). A message whose subject is invalid
// is reported at once, with ErrInvalidSubject (and outbox.ErrPermanent),
// without being published. When ctx ends, the PubAcks already there are
// reported, the others not.
func (p *OutboxPublisher) PublishEach(ctx context.Context, msgs []outbox.Message, ack func(i int, err error)) error {
	if err := p.begin(); err != nil {
		return err
	}
	defer p.end()
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		f, err := p.publishAsync(m)
		if err != nil {
			ack(i, err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
			ack(i, nil)
			continue
		case err := <-f.Err():
			ack(i, refusal(fmt.Errorf("dedupnats: publish to %q: %w", f.Msg().Subject, err)))
			continue
		case <-ctx.Done():
		}
		for j := i; j < len(futures); j++ {
			if futures[j] == nil {
				continue
			}
			select {
			case <-futures[j].Ok():
				ack(j, nil)
			case err := <-futures[j].Err():
				ack(j, refusal(fmt.Errorf("dedupnats: publish to %q: %w", futures[j].Msg().Subject, err)))
			default:
			}
		}
		return ctx.Err()
	}
	return nil
}

// Close stops the publisher: it waits for the Publish and PublishEach
// calls in flight to return (each waits for its PubAcks, up to its own
// context), up to ctx, whose error it returns if ctx ends first. After
// Close, Publish and PublishEach fail with ErrPublisherClosed. Close is
// idempotent; a later call waits as the first did. It closes neither the
// JetStream context nor its connection, which stay the caller's.
func (p *OutboxPublisher) Close(ctx context.Context) error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		p.idle = make(chan struct{})
		if p.inFlight == 0 {
			close(p.idle)
		}
	}
	idle := p.idle
	p.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// begin counts a call in flight, or refuses it once the publisher is
// closed.
func (p *OutboxPublisher) begin() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrPublisherClosed
	}
	p.inFlight++
	return nil
}

// end counts a call out, and tells Close when it was the last.
func (p *OutboxPublisher) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inFlight--
	if p.closed && p.inFlight == 0 {
		close(p.idle)
	}
}

// publishAsync publishes m, with its id as Nats-Msg-Id, and returns its
// PubAck's future, or why it could not be published.
func (p *OutboxPublisher) publishAsync(m outbox.Message) (jetstream.PubAckFuture, error) {
	if !validPublishSubject(m.Destination) {
		return nil, outbox.Permanent(fmt.Errorf("%w: %q", ErrInvalidSubject, m.Destination))
	}
	// The headers are set here rather than by jetstream.WithMsgID and
	// WithExpectStream, which cost an option and its closure per message.
	h := make(natsgo.Header, len(m.Header)+2)
	for k, v := range m.Header {
		h[k] = []string{v}
	}
	h[jetstream.MsgIDHeader] = []string{m.ID}
	if p.expectStream != nil {
		h[jetstream.ExpectedStreamHeader] = p.expectStream
	}
	f, err := p.js.PublishMsgAsync(&natsgo.Msg{Subject: m.Destination, Data: m.Body, Header: h})
	if err != nil {
		return nil, refusal(fmt.Errorf("dedupnats: publish to %q: %w", m.Destination, err))
	}
	return f, nil
}

// awaitAck waits for f's PubAck, or ctx's end (which gives ctx's error
// unless the PubAck is already there).
func awaitAck(ctx context.Context, f jetstream.PubAckFuture) error {
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return refusal(fmt.Errorf("dedupnats: publish to %q: %w", f.Msg().Subject, err))
	case <-ctx.Done():
	}
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return refusal(fmt.Errorf("dedupnats: publish to %q: %w", f.Msg().Subject, err))
	default:
		return ctx.Err()
	}
}

// refusal marks err permanent when JetStream would refuse the message
// again whatever changed but the message: too large for the server or
// the stream, or not a subject.
func refusal(err error) error {
	switch {
	case errors.Is(err, natsgo.ErrMaxPayload), errors.Is(err, natsgo.ErrBadSubject),
		errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum):
		return outbox.Permanent(err)
	}
	return err
}
