package dedupkafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"

	"github.com/segmentio/kafka-go"

	"github.com/dedup-go/dedup/outbox"
)

// ErrInvalidMessage: an outbox message cannot be written: its Destination
// is not a topic name (empty, longer than 249 bytes, "." or "..", or with
// a character other than ASCII letters, digits, '.', '_' and '-'), or its
// ID is empty. It fails alone, without being written, and fails again
// every time: the relay cannot send it. The OutboxPublisher's error for
// it matches outbox.ErrPermanent too, so the relay sets the message aside.
var ErrInvalidMessage = errors.New("dedupkafka: outbox message cannot be written")

// OutboxPublisher is the outbox.Publisher of Kafka, over a kafka-go
// Writer, and an outbox.AckPublisher. NewAsyncOutboxPublisher makes one
// over an asynchronous writer, which reports each message's
// acknowledgement as its partition's produce is answered: the one to give
// a pgoutbox relay, which then keeps its window of messages in flight
// full. NewOutboxPublisher makes one over a synchronous writer, whose
// messages are acknowledged call by call (PublishEach reports them when
// the call's writes returned). Each message is written to the topic its Destination names,
// with its OrderingKey as the record key (none when empty), its Header as
// record headers (in the order of their names) and its ID in the
// HeaderMessageID header after them (a Header of that name is replaced),
// where the next Consumer's
// idstrategy.MessageHeader[T](dedupkafka.HeaderMessageID) finds it. A
// message counts as acknowledged once the writer's produce request was
// acknowledged by all in-sync replicas (RequiredAcks: RequireAll).
//
// The writer's Balancer hashes the key, so the messages of one ordering
// key go to one partition, where Kafka keeps their order: the relay
// writes a key's next message only once the previous one was
// acknowledged, and kafka-go writes a partition's batches one after the
// other, retries included.
//
// The messages of a Publish are written at once: one WriteMessages per
// topic, side by side, so that a topic that does not exist (or whose
// metadata cannot be read) fails its own messages only; the writer's
// per-message errors (kafka.WriteErrors: a partition whose produce
// failed) fail theirs only. kafka-go refuses a whole call when one
// message is over the writer's BatchBytes without saying which: the
// messages of that topic are then written one by one, and the large one
// fails alone.
//
// A message Kafka refuses for good fails with an error matching
// outbox.ErrPermanent, which the relay sets aside: ErrInvalidMessage, a
// message over the writer's BatchBytes (kafka.MessageTooLargeError,
// which kafka-go finds before writing), a topic name the broker calls
// invalid (kafka.InvalidTopic). Every other failure is tried again: a
// topic that does not exist yet (kafka.UnknownTopicOrPartition) ends once
// it is created, a leader election or an authorization once fixed. The
// broker's refusals of a record batch (kafka.MessageSizeTooLarge over
// the topic's max.message.bytes, kafka.InvalidRecord) are not taken as
// permanent either: kafka-go reports them for every message of the batch,
// which holds messages of many calls, so they do not say which message is
// at fault.
//
// kafka-go's Transport answers the metadata a write needs from a cache it
// refreshes every MetadataTTL (6s by default): a topic created by another
// client since the last refresh is unknown to the writer until the next,
// and its messages fail until then (the relay tries them again).
//
// A Publish whose context ends returns the context's error for the
// messages not acknowledged; kafka-go may still write them (its retries
// run on): the relay publishes them again, with the same ids. Bodies are
// copied, as the writer may keep them past the call. The messages of a
// Publish are written at once and then awaited, on either writer; the
// asynchronous writer's batches are written as they fill or time out.
//
// Close the publisher (Close, after the relay stopped) rather than its
// writer: it closes the writer, after what is in flight.
type OutboxPublisher struct {
	w     *kafka.Writer
	async bool // w is asynchronous: its Completion reports to calls

	mu        sync.Mutex
	closing   bool           // Close was called: no call hands w anything more
	writing   sync.WaitGroup // the calls handing messages to w
	closeOnce sync.Once
	closed    chan struct{} // closed once w.Close returned
	closeErr  error
}

var _ outbox.AckPublisher = (*OutboxPublisher)(nil)

// NewOutboxPublisher returns an OutboxPublisher writing with w, a
// synchronous writer (see NewAsyncOutboxPublisher for an asynchronous
// one, which a relay keeps busier), which becomes the publisher's: Close
// closes it (close the publisher after the relay stopped). w must have no
// Topic (each message's Destination is its topic), RequiredAcks
// RequireAll, not be Async, and have a Balancer that hashes the key
// (&kafka.Hash{}, kafka.Murmur2Balancer{} for the Java client's
// partitions, kafka.CRC32Balancer{} for librdkafka's): NewOutboxPublisher
// refuses any other with an error matching dedup.ErrInvalidConfig. Set
// its BatchTimeout to a few milliseconds and its BatchSize to a few
// hundred (256): kafka-go writes a partition's batch once it is full or
// timed out (its defaults are 100 messages and 1s), and gives each batch
// it starts room for BatchSize messages at once, which costs CPU when
// BatchSize is far above what a batch holds (a pgoutbox relay keeps at
// most 1,024 messages in flight, spread over the partitions): in the
// bench module, a relay through a writer with BatchSize 4,096 spent a
// fifth of its CPU clearing that room.
func NewOutboxPublisher(w *kafka.Writer) (*OutboxPublisher, error) {
	switch {
	case w == nil:
		return nil, wrapConfig("the outbox publisher's writer is nil")
	case w.Async:
		return nil, wrapConfig("the outbox publisher's writer is Async: use NewAsyncOutboxPublisher, which reports its writes' acknowledgements")
	}
	if err := checkOutboxWriter(w); err != nil {
		return nil, err
	}
	return &OutboxPublisher{w: w}, nil
}

// checkOutboxWriter checks what every outbox writer needs, synchronous or
// not.
func checkOutboxWriter(w *kafka.Writer) error {
	switch {
	case w.Topic != "":
		return wrapConfig("the outbox publisher's writer has Topic %q; leave it empty (each message's Destination is its topic)", w.Topic)
	case w.RequiredAcks != kafka.RequireAll:
		return wrapConfig("the outbox publisher's writer has RequiredAcks %v; the outbox needs RequireAll, or a message marked sent may be lost with its leader", w.RequiredAcks)
	}
	switch w.Balancer.(type) {
	case nil, *kafka.RoundRobin, *kafka.LeastBytes:
		return wrapConfig("the outbox publisher's writer has Balancer %T, which ignores the key: set one that hashes it (&kafka.Hash{}, kafka.Murmur2Balancer{}), so that the messages of an ordering key stay in one partition, in order", w.Balancer)
	}
	return nil
}

// Close closes the publisher's writer, once the messages in flight are
// written: it waits for the calls still handing their messages to the
// writer, then kafka-go's Close writes the batches the writer still holds
// (the asynchronous writer's) and waits for those being written, whose
// calls then have their reports. Calls after Close fail with an error
// matching io.ErrClosedPipe. When ctx ends first, Close returns ctx's
// error (the close goes on in the background, and a later Close waits for
// it again). Close may be called more than once: every call reports the
// one close. Stop the relay first: a relay whose publisher is closed fails
// every message.
func (p *OutboxPublisher) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closing = true
		p.mu.Unlock()
		done := make(chan struct{})
		p.closed = done
		go func() {
			defer close(done)
			// The calls still handing messages to the writer go first:
			// their messages are in flight too.
			p.writing.Wait()
			p.closeErr = p.w.Close()
		}()
	})
	select {
	case <-p.closed:
		return p.closeErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// beginWrite reports whether a call may hand messages to the writer (the
// publisher is not closed), and counts it in writing until it calls
// endWrite.
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
var errClosed = fmt.Errorf("dedupkafka: the outbox publisher is closed: %w", io.ErrClosedPipe)

// Publish writes msgs and waits for their acknowledgements (see
// outbox.Publisher and OutboxPublisher).
func (p *OutboxPublisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if p.async {
		return p.publishAsync(ctx, msgs)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !p.beginWrite() {
		return errClosed
	}
	defer p.endWrite()
	errs := make([]error, len(msgs))
	records := make([]kafka.Message, len(msgs))
	byTopic := map[string][]int{}
	for i, m := range msgs {
		if errs[i] = outbox.Permanent(checkOutboxMessage(m)); errs[i] == nil {
			records[i] = outboxRecord(m)
			byTopic[m.Destination] = append(byTopic[m.Destination], i)
		}
	}
	var wg sync.WaitGroup
	for topic, idx := range byTopic {
		wg.Go(func() { p.write(ctx, topic, idx, records, errs) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return &outbox.BatchError{Errs: errs}
		}
	}
	return nil
}

// write writes the records of idx, all to topic, and sets their errors.
func (p *OutboxPublisher) write(ctx context.Context, topic string, idx []int, records []kafka.Message, errs []error) {
	batch := make([]kafka.Message, len(idx))
	for j, i := range idx {
		batch[j] = records[i]
	}
	err := p.w.WriteMessages(ctx, batch...)
	var each kafka.WriteErrors
	var tooLarge kafka.MessageTooLargeError
	switch {
	case err == nil:
	case errors.As(err, &each) && len(each) == len(idx):
		for j, i := range idx {
			if each[j] != nil {
				errs[i] = refusal(fmt.Errorf("dedupkafka: write to topic %q: %w", topic, each[j]), false)
			}
		}
	case errors.As(err, &tooLarge) && len(idx) > 1:
		var wg sync.WaitGroup
		for _, i := range idx {
			wg.Go(func() { p.write(ctx, topic, []int{i}, records, errs) })
		}
		wg.Wait()
	default:
		for _, i := range idx {
			errs[i] = refusal(fmt.Errorf("dedupkafka: write to topic %q: %w", topic, err), len(idx) == 1)
		}
	}
}

// refusal marks err permanent when Kafka would refuse the message again
// whatever changed but the message: an invalid topic name, or kafka-go's
// own finding that the message is over BatchBytes, which says which
// message only when it was written alone (alone).
func refusal(err error, alone bool) error {
	var tooLarge kafka.MessageTooLargeError
	switch {
	case errors.Is(err, kafka.InvalidTopic), alone && errors.As(err, &tooLarge):
		return outbox.Permanent(err)
	}
	return err
}

// checkOutboxMessage says why m cannot be written, or nil.
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

// outboxRecord is the record of m.
func outboxRecord(m outbox.Message) kafka.Message {
	r := kafka.Message{Topic: m.Destination, Value: bytes.Clone(m.Body)}
	if m.OrderingKey != "" {
		r.Key = []byte(m.OrderingKey)
	}
	r.Headers = make([]kafka.Header, 0, len(m.Header)+1)
	for _, k := range slices.Sorted(maps.Keys(m.Header)) {
		if k != HeaderMessageID {
			r.Headers = append(r.Headers, kafka.Header{Key: k, Value: []byte(m.Header[k])})
		}
	}
	r.Headers = append(r.Headers, kafka.Header{Key: HeaderMessageID, Value: []byte(m.ID)})
	return r
}
