package dedupfranz

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedup-go/dedup/outbox"
)

// ErrInvalidMessage: an outbox message cannot be produced: its Destination
// is not a topic name (empty, longer than 249 bytes, "." or "..", or with
// a character other than ASCII letters, digits, '.', '_' and '-'), or its
// ID is empty. It fails alone, without being produced, and fails again
// every time. The OutboxPublisher's error for it matches
// outbox.ErrPermanent too, so the relay sets the message aside.
var ErrInvalidMessage = errors.New("dedupfranz: outbox message cannot be produced")

// OutboxPublisher is the outbox.Publisher of Kafka over a franz-go client,
// and an outbox.AckPublisher: each message is produced with kgo's
// asynchronous Produce, and reported as its own promise is called, when
// its partition's produce request was acknowledged by all in-sync
// replicas. A pgoutbox relay then produces a key's next message as soon as
// its predecessor was acknowledged, and keeps its window of messages in
// flight full.
//
// Each message goes to the topic its Destination names, with its
// OrderingKey as the record key (none when empty), its Header as record
// headers (in the order of their names) and its ID in the HeaderMessageID
// header after them (a Header of that name is replaced), where the next
// Consumer's idstrategy.MessageHeader[T](dedupfranz.HeaderMessageID) finds
// it.
//
// Order per key: kgo's default partitioner hashes the key (murmur2, as the
// Java client), so an ordering key's messages go to one partition; the
// relay produces a key's next message only once its predecessor was
// acknowledged, and kgo's idempotent producer (its default) keeps a
// partition's batches in order across retries.
//
// A message Kafka refuses for good fails with an error matching
// outbox.ErrPermanent, which the relay sets aside: ErrInvalidMessage, a
// record over the client's ProducerBatchMaxBytes or the topic's
// max.message.bytes (kerr.MessageTooLarge), a topic name the broker calls
// invalid (kerr.InvalidTopicException). Every other failure is tried
// again by the relay: an unknown topic ends once it is created, a leader
// election or an authorization once fixed.
//
// When PublishEach's context ends, the messages not reported yet are not
// acknowledged (the relay publishes them again, with the same ids); kgo
// fails those it has not sent yet, and may still store those it sent.
type OutboxPublisher struct {
	cl *kgo.Client

	mu        sync.Mutex
	closing   bool           // Close was called: no call produces anything more
	writing   sync.WaitGroup // the calls producing
	closeOnce sync.Once
	closed    chan struct{} // closed once the client was closed
	closeErr  error
}

var _ outbox.AckPublisher = (*OutboxPublisher)(nil)

// NewOutboxPublisher returns an OutboxPublisher producing with cl, which
// becomes the publisher's: Close flushes and closes it (close the
// publisher after the relay stopped). cl must produce with RequiredAcks
// kgo.AllISRAcks (kgo's default), or a message marked sent may be lost
// with its leader, and must not be a group consumer or transactional:
// NewOutboxPublisher refuses any other with an error matching
// dedup.ErrInvalidConfig. Keep kgo's default partitioner (or one that
// hashes the key), so that an ordering key's messages stay in one
// partition, in order.
func NewOutboxPublisher(cl *kgo.Client) (*OutboxPublisher, error) {
	if cl == nil {
		return nil, wrapConfig("the outbox publisher's client is nil")
	}
	if acks, ok := cl.OptValue(kgo.RequiredAcks).(kgo.Acks); ok && acks != kgo.AllISRAcks() {
		return nil, wrapConfig("the outbox publisher's client has RequiredAcks other than AllISRAcks; the outbox needs every in-sync replica, or a message marked sent may be lost with its leader")
	}
	if g, _ := cl.OptValue(kgo.ConsumerGroup).(string); g != "" {
		return nil, wrapConfig("the outbox publisher's client consumes in group %q; give it a client of its own", g)
	}
	if id, _ := cl.OptValue(kgo.TransactionalID).(string); id != "" {
		return nil, wrapConfig("the outbox publisher's client is transactional (%q); give it a client of its own", id)
	}
	return &OutboxPublisher{cl: cl}, nil
}

// Publish produces msgs and waits for their acknowledgements (see
// outbox.Publisher): PublishEach, its reports gathered.
func (p *OutboxPublisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	errs := make([]error, len(msgs))
	reported := make([]bool, len(msgs))
	var mu sync.Mutex
	err := p.PublishEach(ctx, msgs, func(i int, err error) {
		mu.Lock()
		errs[i], reported[i] = err, true
		mu.Unlock()
	})
	if err != nil {
		for i := range errs {
			if !reported[i] {
				errs[i] = err
			}
		}
		if !slices.Contains(reported, true) {
			return err
		}
	}
	for _, err := range errs {
		if err != nil {
			return &outbox.BatchError{Errs: errs}
		}
	}
	return nil
}

// PublishEach produces msgs and reports each message's acknowledgement as
// its promise is called (see outbox.AckPublisher and OutboxPublisher).
func (p *OutboxPublisher) PublishEach(ctx context.Context, msgs []outbox.Message, ack func(i int, err error)) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !p.beginWrite() {
		return errClosed
	}
	c := &asyncCall{ack: ack, left: len(msgs), reported: make([]bool, len(msgs)), all: make(chan struct{})}
	for i, m := range msgs {
		if err := checkOutboxMessage(m); err != nil {
			c.report(i, outbox.Permanent(err))
			continue
		}
		p.cl.Produce(ctx, outboxRecord(m), func(r *kgo.Record, err error) {
			if err != nil {
				err = refusal(fmt.Errorf("dedupfranz: produce to topic %q: %w", r.Topic, err))
			}
			c.report(i, err)
		})
	}
	p.endWrite() // handed over: Close's Flush waits for the rest
	return c.wait(ctx)
}

// refusal marks err permanent when Kafka would refuse the message again
// whatever changed but the message.
func refusal(err error) error {
	switch {
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.InvalidTopicException):
		return outbox.Permanent(err)
	}
	return err
}

// asyncCall is one PublishEach: what is left to report, and whether it
// returned.
type asyncCall struct {
	ack func(int, error)

	mu       sync.Mutex
	reported []bool
	left     int
	returned bool          // PublishEach returned: later reports go nowhere
	all      chan struct{} // closed once every message was reported
}

// report reports message i once, unless the call returned.
func (c *asyncCall) report(i int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.returned || c.reported[i] {
		return
	}
	c.reported[i] = true
	c.ack(i, err)
	if c.left--; c.left == 0 {
		close(c.all)
	}
}

// wait waits for every report, or ctx's end; no report follows it.
func (c *asyncCall) wait(ctx context.Context) error {
	select {
	case <-c.all:
	case <-ctx.Done():
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.returned = true
	if c.left == 0 {
		return nil
	}
	return ctx.Err()
}

// Close closes the publisher's client once the messages in flight are
// acknowledged or failed: it waits for the calls still producing, flushes
// the client (bounded by ctx) and closes it. Calls after Close fail with
// an error matching io.ErrClosedPipe. When ctx ends first, Close returns
// ctx's error (the close goes on in the background, and a later Close
// waits for it again). Close may be called more than once: every call
// reports the one close. Stop the relay first.
func (p *OutboxPublisher) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closing = true
		p.mu.Unlock()
		done := make(chan struct{})
		p.closed = done
		go func() {
			defer close(done)
			p.writing.Wait()
			p.closeErr = p.cl.Flush(context.WithoutCancel(ctx))
			p.cl.Close()
		}()
	})
	select {
	case <-p.closed:
		return p.closeErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *OutboxPublisher) beginWrite() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return false
	}
	p.writing.Add(1)
	return true
}

func (p *OutboxPublisher) endWrite() { p.writing.Done() }

// errClosed is the error of a call after Close.
var errClosed = fmt.Errorf("dedupfranz: the outbox publisher is closed: %w", io.ErrClosedPipe)

// checkOutboxMessage says why m cannot be produced, or nil.
func checkOutboxMessage(m outbox.Message) error {
	if m.ID == "" {
		return fmt.Errorf("%w: no id", ErrInvalidMessage)
	}
	t := m.Destination
	if t == "" || t == "." || t == ".." || len(t) > 249 {
		return fmt.Errorf("%w: %q is not a topic name", ErrInvalidMessage, t)
	}
	for _, c := range []byte(t) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q is not a topic name (a character other than ASCII letters, digits, '.', '_', '-')", ErrInvalidMessage, t)
		}
	}
	return nil
}

// outboxRecord is the record of m; its body is copied (kgo keeps the
// record until it is acknowledged, past the call).
func outboxRecord(m outbox.Message) *kgo.Record {
	r := &kgo.Record{Topic: m.Destination, Value: bytes.Clone(m.Body)}
	if m.OrderingKey != "" {
		r.Key = []byte(m.OrderingKey)
	}
	r.Headers = make([]kgo.RecordHeader, 0, len(m.Header)+1)
	for _, k := range slices.Sorted(maps.Keys(m.Header)) {
		if k != HeaderMessageID {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(m.Header[k])})
		}
	}
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderMessageID, Value: []byte(m.ID)})
	return r
}
