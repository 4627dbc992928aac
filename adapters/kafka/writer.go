package dedupkafka

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/segmentio/kafka-go"

	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/outbox"
)

// HeaderMessageID is the header [Writer] and [StampMessageID] put the
// message id in. Key a receiver on it with
// idstrategy.MessageHeader[T](dedupkafka.HeaderMessageID).
const HeaderMessageID = "Message-Id"

// StampMessageID sets the HeaderMessageID header of every message that has
// none, to newID() (outbox.NewMessageID when newID is nil), in place.
// Messages that have one keep it, so stamping again before a retry changes
// nothing. [Writer] stamps with it; call it yourself for messages you
// write otherwise.
func StampMessageID(msgs []kafka.Message, newID func() string) {
	if newID == nil {
		newID = outbox.NewMessageID
	}
	for i := range msgs {
		if _, ok := Header(msgs[i].Headers).Get(HeaderMessageID); ok {
			continue
		}
		// A fresh slice: the caller's headers may share a backing array
		// between messages.
		h := make([]kafka.Header, len(msgs[i].Headers), len(msgs[i].Headers)+1)
		copy(h, msgs[i].Headers)
		msgs[i].Headers = append(h, kafka.Header{Key: HeaderMessageID, Value: []byte(newID())})
	}
}

// Writer is a kafka-go Writer that stamps a HeaderMessageID on every
// message before writing it. kafka-go has no idempotent producer: when a
// write times out after the broker stored it, the retry (the Writer's own,
// or the caller's with the same messages) stores a second copy at another
// offset. Both copies carry the same id, so a receiver keyed on the header
// runs its handler once.
//
// Close closes W: close the Writer, not W, when you are done with it.
type Writer struct {
	// W writes the messages. Required. Writer.Close closes it.
	W *kafka.Writer
	// NewID makes the id of a message without one. Defaults to
	// outbox.NewMessageID.
	NewID func() string
	// Injector, when set, writes the trace context of the ctx given to
	// WriteMessages into each message's headers (a header of the same name
	// the message already has takes the new value), so that the consumer's
	// delivery is linked to the producer's trace: the dedupotel Observer is
	// one (W3C traceparent and tracestate). Defaults to none.
	Injector delivery.Injector

	closeOnce sync.Once
	closed    chan struct{} // closed once W.Close returned
	closeErr  error
}

// WriteMessages stamps the messages that have no HeaderMessageID (in
// place: retrying with the same slice keeps their ids), writes the trace
// context of ctx into their headers when the Writer has an Injector (in
// place too), and writes them.
func (w *Writer) WriteMessages(ctx context.Context, msgs ...kafka.Message) error {
	if w == nil || w.W == nil {
		return errors.New("dedupkafka: Writer has no kafka.Writer")
	}
	StampMessageID(msgs, w.NewID)
	if w.Injector != nil {
		for i := range msgs {
			// A fresh slice: the caller's headers may share a backing array
			// between messages.
			h := slices.Clone(msgs[i].Headers)
			w.Injector.Inject(ctx, func(k, v string) { h = setHeader(h, k, v) })
			msgs[i].Headers = h
		}
	}
	return w.W.WriteMessages(ctx, msgs...)
}

// Close closes W: kafka-go's Close writes the batches W still holds (an
// Async writer's) and waits for those being written, after which
// WriteMessages fails with io.ErrClosedPipe. It returns W.Close's error,
// or ctx's error when ctx ends first (the close goes on in the
// background, and a later Close waits for it again). Close may be called
// more than once: every call reports the one close.
func (w *Writer) Close(ctx context.Context) error {
	if w == nil || w.W == nil {
		return nil
	}
	w.closeOnce.Do(func() {
		done := make(chan struct{})
		w.closed = done
		go func() {
			defer close(done)
			w.closeErr = w.W.Close()
		}()
	})
	select {
	case <-w.closed:
		return w.closeErr
	case <-ctx.Done():
		return ctx.Err()
	}
}
