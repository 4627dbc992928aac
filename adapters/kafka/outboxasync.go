package dedupkafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/segmentio/kafka-go"

	"github.com/dedup-go/dedup/outbox"
)

// NewAsyncOutboxPublisher returns an OutboxPublisher writing with w, an
// asynchronous writer (Async true), that reports each message's
// acknowledgement as its partition's produce request is answered
// (outbox.AckPublisher): a pgoutbox relay then writes a key's next
// message as soon as its predecessor was acknowledged, and keeps its
// window of messages in flight full, where the synchronous writer of
// NewOutboxPublisher holds a key's next message until the whole call
// that carried its predecessor returned.
//
// NewAsyncOutboxPublisher sets w's Completion, through which kafka-go
// reports each batch it wrote: w must have none, and be used by nothing
// but the publisher (a message written to w by anyone else is not
// reported to anyone). w must also have no Topic, RequiredAcks
// RequireAll and a Balancer that hashes the key, as for
// NewOutboxPublisher, which says why; NewAsyncOutboxPublisher refuses any
// other writer with an error matching dedup.ErrInvalidConfig, and leaves
// it untouched. w becomes the publisher's: its Close closes it, after the
// batches being written (close the publisher after the relay stopped).
// Set its BatchTimeout to a few milliseconds and its BatchSize to a few
// hundred, as for NewOutboxPublisher, which says why.
//
// Order per key: kafka-go writes a partition's batches one after the
// other, retries included, and a relay has at most one message of a key
// in flight: a key's next message is written only once its predecessor
// was acknowledged, to the partition the key hashes to.
//
// Failures are those of NewOutboxPublisher's writer, with one difference:
// kafka-go reports a batch's failure for every message of the batch, so a
// failed produce fails each message of it, none of them for good
// (kafka.MessageSizeTooLarge and kafka.InvalidRecord included: they do
// not say which message is at fault). What fails before anything is
// written is reported at once, per topic: a topic whose partitions cannot
// be read (unknown yet: tried again), a message over BatchBytes (the
// messages of its topic are then written one by one, and the large one
// fails alone, for good), ErrInvalidMessage. When PublishEach's context
// ends, the messages not reported yet are not acknowledged (the relay
// publishes them again, with the same ids); kafka-go may still write
// them, and their reports, later, go nowhere.
func NewAsyncOutboxPublisher(w *kafka.Writer) (*OutboxPublisher, error) {
	switch {
	case w == nil:
		return nil, wrapConfig("the outbox publisher's writer is nil")
	case !w.Async:
		return nil, wrapConfig("the asynchronous outbox publisher's writer is not Async: set Async, or use NewOutboxPublisher")
	case w.Completion != nil:
		return nil, wrapConfig("the asynchronous outbox publisher's writer has a Completion: leave it nil, the publisher sets its own")
	}
	if err := checkOutboxWriter(w); err != nil {
		return nil, err
	}
	w.Completion = completion
	return &OutboxPublisher{w: w, async: true}, nil
}

// PublishEach writes msgs and reports each message's acknowledgement as
// it arrives (see outbox.AckPublisher and NewAsyncOutboxPublisher). With
// the synchronous writer of NewOutboxPublisher, it reports every message
// once the writes of the call returned, as Publish does.
func (p *OutboxPublisher) PublishEach(ctx context.Context, msgs []outbox.Message, ack func(i int, err error)) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !p.async {
		err := p.Publish(ctx, msgs)
		var be *outbox.BatchError
		switch {
		case err == nil:
			for i := range msgs {
				ack(i, nil)
			}
		case errors.As(err, &be):
			for i, e := range be.Errs {
				ack(i, e)
			}
			return nil
		}
		return err
	}
	if !p.beginWrite() {
		return errClosed
	}
	c := &asyncCall{ack: ack, left: len(msgs), reported: make([]bool, len(msgs)), all: make(chan struct{})}
	records := make([]kafka.Message, len(msgs))
	handles := make([]recordHandle, len(msgs))
	byTopic := map[string][]int{}
	for i, m := range msgs {
		if err := checkOutboxMessage(m); err != nil {
			c.report(i, outbox.Permanent(err))
			continue
		}
		handles[i] = recordHandle{call: c, i: i}
		records[i] = outboxRecord(m)
		records[i].WriterData = &handles[i]
		byTopic[m.Destination] = append(byTopic[m.Destination], i)
	}
	for topic, idx := range byTopic {
		p.writeAsync(ctx, c, topic, idx, records)
	}
	p.endWrite() // handed over: Close's w.Close waits for the rest
	return c.wait(ctx)
}

// publishAsync is Publish over the asynchronous writer: PublishEach, its
// reports gathered.
func (p *OutboxPublisher) publishAsync(ctx context.Context, msgs []outbox.Message) error {
	errs := make([]error, len(msgs))
	reported := make([]bool, len(msgs))
	err := p.PublishEach(ctx, msgs, func(i int, err error) { errs[i], reported[i] = err, true })
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

// writeAsync hands the records of idx, all to topic, to the asynchronous
// writer, and reports those it refused before writing anything.
func (p *OutboxPublisher) writeAsync(ctx context.Context, c *asyncCall, topic string, idx []int, records []kafka.Message) {
	batch := make([]kafka.Message, len(idx))
	for j, i := range idx {
		batch[j] = records[i]
	}
	err := p.w.WriteMessages(ctx, batch...)
	var tooLarge kafka.MessageTooLargeError
	switch {
	case err == nil:
	case errors.As(err, &tooLarge) && len(idx) > 1:
		for _, i := range idx {
			p.writeAsync(ctx, c, topic, []int{i}, records)
		}
	default:
		for _, i := range idx {
			c.report(i, refusal(fmt.Errorf("dedupkafka: write to topic %q: %w", topic, err), len(idx) == 1))
		}
	}
}

// recordHandle is a record's kafka.Message.WriterData: the call that
// wrote it, and its index there.
type recordHandle struct {
	call *asyncCall
	i    int
}

// completion is the asynchronous writer's Completion: it reports each
// message of a batch to its call.
func completion(msgs []kafka.Message, err error) {
	for _, m := range msgs {
		h, ok := m.WriterData.(*recordHandle)
		if !ok {
			continue
		}
		var merr error
		if err != nil {
			merr = refusal(fmt.Errorf("dedupkafka: write to topic %q: %w", m.Topic, err), false)
		}
		h.call.report(h.i, merr)
	}
}

// asyncCall is one PublishEach over the asynchronous writer: what is left
// to report, and whether it returned.
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
