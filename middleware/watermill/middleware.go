package dedupwatermill

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
)

// Middleware runs each Watermill message's handler once per message id, on
// a dedup receiver: it claims the id in a store, runs the handler under a
// lease it extends, keeps the messages the handler produced, and gives a
// duplicate those same messages back (same UUIDs, metadata and payloads)
// for the router to publish again. It is safe for concurrent use and holds
// no goroutine.
type Middleware struct {
	s   *settings
	rcv *adapter.Receiver[*call, *produced]
	log *slog.Logger
}

// New returns a Middleware keeping its records in st. A nil store or
// invalid options are an error matching dedup.ErrInvalidConfig; nil
// options mean every default.
func New(st store.Store, opts *Options) (*Middleware, error) {
	s, err := opts.settings()
	if err != nil {
		return nil, err
	}
	s.cfg.Codec = codec{}
	mw := &Middleware{s: s}
	rcv, err := dedup.NewReceiver(st, mw.idOf, mw.run, &s.cfg)
	if err != nil {
		return nil, fmt.Errorf("dedupwatermill: %w", err)
	}
	mw.rcv = adapter.Bind(rcv)
	mw.log = mw.rcv.Logger()
	return mw, nil
}

// Stats returns the counters of the middleware's receiver.
func (mw *Middleware) Stats() dedup.Stats { return mw.rcv.Stats() }

// Middleware is the message.HandlerMiddleware. Chain it inside a poison
// queue that takes its dead letters and outside Watermill's Retry:
//
//	poison, _ := middleware.PoisonQueueWithFilter(pub, "poison", dedupwatermill.IsPoison)
//	router.AddMiddleware(poison, mw.Middleware, middleware.Retry{MaxRetries: 3}.Middleware)
func (mw *Middleware) Middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		return mw.handle(msg, h)
	}
}

var _ message.HandlerMiddleware = (*Middleware)(nil).Middleware

// call is one message through the receiver, its message type.
type call struct {
	msg *message.Message
	h   message.HandlerFunc
	fp  bool // Options.FingerprintPayload
}

// Fingerprint is the SHA-256 of the payload, under
// Options.FingerprintPayload; "" (no check) otherwise.
func (c *call) Fingerprint() (string, error) {
	if !c.fp {
		return "", nil
	}
	sum := sha256.Sum256(c.msg.Payload)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

var _ adapter.Fingerprinter = (*call)(nil)

// run is the receiver's handler: the Watermill handler, under the
// receiver's context (cancelled when the lease is lost), and what it
// produced.
func (mw *Middleware) run(ctx context.Context, c *call) (*produced, error) {
	orig := c.msg.Context()
	c.msg.SetContext(ctx)
	defer c.msg.SetContext(orig)
	msgs, err := c.h(c.msg)
	if err != nil {
		return nil, err
	}
	p := &produced{msgs: msgs}
	if size := keptSize(msgs); size > mw.s.maxResultSize {
		p.notKept = "the produced messages are " + strconv.Itoa(size) + " bytes encoded, over MaxResultSize (" + strconv.Itoa(mw.s.maxResultSize) + ")"
		mw.log.WarnContext(orig, "dedupwatermill: the produced messages are too large to keep; a duplicate of this message will be poison (ErrResultNotKept)",
			slog.String("message_uuid", c.msg.UUID), slog.Int("size", size), slog.Int("max_result_size", mw.s.maxResultSize))
	}
	return p, nil
}

// handle hands msg to the receiver until it has an answer for the router:
// the produced messages (processed, or a duplicate: the first delivery's),
// a PoisonError (dead letter), or another error (nack) once a retry was
// held in place as long as Options.MaxHold allows. Each hand-over is one
// delivery, one event for the Observer (as for the HTTP and gRPC
// middleware, the event carries Decide's answer and Settled is false:
// what the router does with the answer is the router's).
func (mw *Middleware) handle(msg *message.Message, h message.HandlerFunc) ([]*message.Message, error) {
	if msg == nil {
		return nil, errors.New("dedupwatermill: nil message")
	}
	ctx := msg.Context()
	c := &call{msg: msg, h: h, fp: mw.s.FingerprintPayload}
	var held time.Duration
	for {
		res, err := mw.rcv.Handle(ctx, c)
		if err == nil && res.Status.Done() {
			// The fast path: no Decide needed for an acknowledgement.
			msgs, perr := answer(&res)
			if perr != nil {
				mw.markPoison(msg, &res, perr)
				return nil, perr
			}
			return msgs, nil
		}
		switch dec := mw.rcv.Decide(res, err); dec.Action {
		case delivery.DeadLetter:
			perr := &PoisonError{Reason: dec.Reason, Err: err}
			mw.markPoison(msg, &res, perr)
			return nil, perr
		default:
			if !mw.retry(ctx, dec, &held) {
				if err == nil { // in flight: Handle's answer is a status, not an error
					err = fmt.Errorf("%w (held %v)", ErrInFlight, held.Round(time.Millisecond))
				}
				return nil, err
			}
		}
	}
}

// answer returns what the router publishes for a delivery the receiver
// acknowledges: the handler's messages, or a duplicate's kept ones. A
// duplicate whose messages cannot be given back is poison.
func answer(res *dedup.Result[*produced]) ([]*message.Message, *PoisonError) {
	p := res.Value
	switch {
	case p == nil:
		// A duplicate whose kept messages did not decode (the receiver
		// logged why): acknowledging it would drop them.
		err := res.Problem
		if err == nil {
			err = dedup.ErrResultUndecodable
		}
		return nil, &PoisonError{Reason: delivery.ReasonNotStored, Err: err}
	case res.Status == delivery.StatusDuplicate && p.notKept != "":
		return nil, &PoisonError{Reason: delivery.ReasonNotStored, Err: fmt.Errorf("%w: %s", ErrResultNotKept, p.notKept)}
	}
	return p.take(), nil
}

// take returns the messages, to one caller as they are and to every other
// (duplicates inside this process share the first delivery's value) as
// copies, so that no two publishes share a message.
func (p *produced) take() []*message.Message {
	if len(p.msgs) == 0 || !p.taken.Swap(true) {
		return p.msgs
	}
	out := make([]*message.Message, len(p.msgs))
	for i, m := range p.msgs {
		out[i] = m.Copy()
	}
	return out
}

// retry carries out a Retry decision: it holds the message for the
// decision's delay (what remains of MaxHold at most), and reports true
// when the receiver is to be asked again in place (the handler did not
// run: in flight elsewhere, store down), false for a nack.
func (mw *Middleware) retry(ctx context.Context, dec delivery.Decision, held *time.Duration) bool {
	if dec.Reason == delivery.ReasonCanceled || ctx.Err() != nil {
		return false
	}
	wait := min(dec.Delay, mw.s.MaxHold-*held)
	began := time.Now()
	full := hold(ctx, wait)
	*held += time.Since(began)
	return full && wait == dec.Delay && notRun(dec.Reason)
}

// notRun reports whether a retry is for a delivery whose handler did not
// run and that the receiver may take in a moment: another delivery holds
// the key, or the store is down.
func notRun(r delivery.Reason) bool {
	return r == delivery.ReasonInFlight || r == delivery.ReasonStoreUnavailable || r == delivery.ReasonStoreMisconfigured
}

// hold waits d, or less when ctx ends (the router closes), and reports
// whether it waited the whole of d.
func hold(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// markPoison sets the dead-letter metadata (delivery.Header*) on msg, which
// Watermill's PoisonQueue publishes as it is.
func (mw *Middleware) markPoison(msg *message.Message, res *dedup.Result[*produced], perr *PoisonError) {
	if msg.Metadata == nil {
		msg.Metadata = message.Metadata{}
	}
	md := msg.Metadata
	md.Set(delivery.HeaderReason, string(perr.Reason))
	if perr.Err != nil {
		md.Set(delivery.HeaderError, oneLine(perr.Err.Error()))
	}
	if res.Key != "" {
		md.Set(delivery.HeaderKey, res.Key)
	}
	if res.Attempt > 0 {
		md.Set(delivery.HeaderAttempt, strconv.Itoa(res.Attempt))
	}
	if topic := message.SubscribeTopicFromCtx(msg.Context()); topic != "" {
		md.Set(delivery.HeaderSource, topic)
	}
	if msg.UUID != "" {
		md.Set(delivery.HeaderOriginalMessageID, msg.UUID)
	}
	md.Set(delivery.HeaderDeadLetteredAt, time.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	mw.log.WarnContext(msg.Context(), "dedupwatermill: poison message",
		slog.String("message_uuid", msg.UUID), slog.String("reason", string(perr.Reason)), slog.Any("error", perr.Err))
}

// oneLine cuts s at its first line break, for a metadata value.
func oneLine(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' || s[i] == '\r' {
			return s[:i]
		}
	}
	return s
}

// keptSize is the exact size of msgs encoded by codec.
func keptSize(msgs []*message.Message) int {
	n := 1 + uvarintLen(len(msgs))
	for _, m := range msgs {
		if m == nil {
			continue
		}
		n += uvarintLen(len(m.UUID)) + len(m.UUID) + uvarintLen(len(m.Metadata)) + uvarintLen(len(m.Payload)) + len(m.Payload)
		for k, v := range m.Metadata {
			n += uvarintLen(len(k)) + len(k) + uvarintLen(len(v)) + len(v)
		}
	}
	return n
}

func uvarintLen(v int) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}
