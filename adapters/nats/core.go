package dedupnats

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Subscriber runs a dedup.Receiver over a core NATS subscription, plain or
// in a queue group. Core NATS has no acknowledgements and no redelivery:
//
//   - a duplicate is dropped; a duplicate request (a message with a reply
//     subject) is answered with the stored result, as the first was;
//   - a request that cannot be done now (in flight elsewhere, handler
//     error, store down) gets a reply with Dedup-Reason and
//     Dedup-Retry-After, so the requester sends it again (see
//     ReplyErrorOf);
//   - a plain message that cannot be done now is dead-lettered with reason
//     ReasonNoRedelivery, since nothing would deliver it again, except one
//     in flight elsewhere, which its holder finishes;
//   - poison is dead-lettered, and a poison request also gets a reply.
//
// The envelope's Source is the subject and ID the Nats-Msg-Id header; it
// has no stream, offset or delivery count (0: core NATS does not count).
// [Native] returns the *nats.Msg behind it, whose Reply is the request's
// reply subject.
type Subscriber[T, R any] struct {
	nc      *natsgo.Conn
	subject string
	queue   string
	rcv     *adapter.Receiver[*dedup.Message[T], R]
	opts    Options
	dl      *deadLetterer
	stats   counters
	live    atomic.Pointer[natsgo.Subscription] // for the delivery goroutine's drop checks
	dropped atomic.Int64                        // the client's drop count last reported

	mu       sync.Mutex
	started  bool
	stopping bool // Stop was called, or the stop was already recorded in err
	closing  bool // no more dispatches: the subscription is closed
	err      error
	sub      *natsgo.Subscription
	closed   <-chan struct{}
	sem      chan struct{}
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stopped  chan struct{}
}

var _ dedup.Consumer = (*Subscriber[struct{}, struct{}])(nil)

// NewSubscriber returns a Subscriber of subject (in queue group queue, when
// not empty) that feeds rcv. Replies are encoded by Options.ReplyEncoder.
// opts may be nil for the defaults, but DeadLetterSubject has none: without it (or
// DropPoison), NewSubscriber fails with ErrNoDeadLetter. Bad input is an
// error matching dedup.ErrInvalidConfig, never a panic.
//
// nc stays the caller's: the Subscriber never closes it, not even on Stop
// or a hard stop; it closes only the subscription it made. Close nc after
// Stop returns.
func NewSubscriber[T, R any](nc *natsgo.Conn, subject, queue string, rcv *dedup.Receiver[*dedup.Message[T], R], opts *Options) (*Subscriber[T, R], error) {
	switch {
	case nc == nil:
		return nil, wrapConfig("connection is nil")
	case subject == "":
		return nil, wrapConfig("subject is empty")
	case rcv == nil:
		return nil, wrapConfig("receiver is nil")
	}
	b := adapter.Bind(rcv)
	o := opts.withDefaults(b.Logger())
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.DeadLetterSubject != "" && subjectMatches(subject, o.DeadLetterSubject) {
		return nil, &configError{sentinel: ErrDeadLetterStream, msg: fmt.Sprintf("dedupnats: subject %q matches dead-letter subject %q: the subscriber would read its own dead letters back", subject, o.DeadLetterSubject)}
	}
	s := &Subscriber[T, R]{
		nc: nc, subject: subject, queue: queue, rcv: b, opts: o,
		sem: make(chan struct{}, o.Concurrency), stopped: make(chan struct{}),
	}
	if o.DeadLetterSubject != "" {
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, fmt.Errorf("dedupnats: JetStream for dead letters: %w", err)
		}
		s.dl = &deadLetterer{subject: o.DeadLetterSubject, nc: nc, js: js}
		s.dl.stats = &s.stats
	}
	return s, nil
}

// Start checks the dead-letter subject, subscribes and returns once the
// server has the subscription. It fails, matching dedup.ErrInvalidConfig,
// when no stream captures the DeadLetterSubject and CoreDeadLetters is not
// set (ErrDeadLetterStream). A Subscriber starts once.
//
// ctx is the subscriber's lifetime. Its end before Stop is a hard stop
// nobody asked for: the subscription is dropped, the handlers' contexts
// are cancelled, and it is logged at error level and reported by Err
// (ErrStoppedUnasked wrapping context.Cause(ctx)). Shut down with Stop, on
// a context of its own.
func (s *Subscriber[T, R]) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return ErrStarted
	}
	if s.dl != nil { // else DropPoison: NewSubscriber refuses neither
		if err := s.dl.resolve(ctx, "", s.opts.CoreDeadLetters, s.opts.Logger); err != nil {
			return err
		}
	}
	// The subject is the template of what it matches, and the queue group
	// the consumer group.
	o := &origin{server: &connServer{nc: s.nc}, group: s.queue, templates: subjectTemplates(s.opts.DestinationTemplate, []string{s.subject}, "")}
	workCtx, cancel := context.WithCancel(adapter.WithOrigin(ctx, o.fill))
	sub, err := s.nc.QueueSubscribe(s.subject, s.queue, func(m *natsgo.Msg) { s.dispatch(workCtx, m) })
	if err != nil {
		cancel()
		return fmt.Errorf("dedupnats: subscribe %q: %w", s.subject, err)
	}
	if s.opts.PendingMsgsLimit != 0 || s.opts.PendingBytesLimit != 0 {
		msgs, bytes := cmp.Or(s.opts.PendingMsgsLimit, natsgo.DefaultSubPendingMsgsLimit), cmp.Or(s.opts.PendingBytesLimit, natsgo.DefaultSubPendingBytesLimit)
		if err := sub.SetPendingLimits(msgs, bytes); err != nil {
			cancel()
			_ = sub.Unsubscribe()
			return fmt.Errorf("dedupnats: pending limits of %q: %w", s.subject, err)
		}
	}
	s.live.Store(sub)
	// The closed handler runs when the subscription's delivery goroutine
	// exits: after Unsubscribe, after a drain, and when the connection
	// closes (where the subscription's status never says closed).
	closed := make(chan struct{})
	sub.SetClosedHandler(func(string) { close(closed) })
	s.closed = closed
	fctx, fcancel := withDeadline(ctx, s.opts.SettleTimeout)
	defer fcancel()
	if err := s.nc.FlushWithContext(fctx); err != nil {
		cancel()
		_ = sub.Unsubscribe()
		return fmt.Errorf("dedupnats: subscribe %q: %w", s.subject, err)
	}
	s.started, s.sub, s.cancel = true, sub, cancel
	watched := make(chan struct{}) // closed once the watch below ran
	stopWatch := context.AfterFunc(workCtx, func() {
		defer close(watched)
		s.mu.Lock()
		if !s.stopping && s.err == nil && ctx.Err() != nil {
			// Start's context ended and nobody called Stop: a hard stop
			// the user did not ask for, which must not go unheard.
			s.err = fmt.Errorf("%w: subscription to %q: Start's context ended: %w", ErrStoppedUnasked, s.subject, context.Cause(ctx))
			s.opts.Logger.ErrorContext(ctx, "dedupnats: subscriber stopped without Stop",
				slog.String("subject", s.subject), slog.Any("error", s.err))
		}
		s.stopping = true
		s.mu.Unlock()
		s.checkDropped(ctx, sub)
		_ = sub.Unsubscribe()
	})
	go func() { // owned by the subscription: ends when it closes
		<-s.closed
		s.mu.Lock()
		s.closing = true
		if !s.stopping {
			cause := error(natsgo.ErrBadSubscription)
			if s.nc.IsClosed() {
				cause = natsgo.ErrConnectionClosed
			}
			s.err = fmt.Errorf("%w: subscription to %q closed: %w", ErrStoppedUnasked, s.subject, cause)
			s.opts.Logger.ErrorContext(ctx, "dedupnats: subscriber stopped without Stop", slog.String("subject", s.subject), slog.Any("error", s.err))
		}
		s.mu.Unlock()
		s.wg.Wait()
		if !stopWatch() {
			<-watched // Err holds what the watch records before Stopped closes
		}
		cancel()
		close(s.stopped)
	}()
	return nil
}

// Stop drains the subscription (messages already received are handled),
// waits for the handlers, and returns. When ctx ends first, the handlers'
// contexts are cancelled and Stop returns ctx's error; Stopped tells when
// they are gone.
func (s *Subscriber[T, R]) Stop(ctx context.Context) error {
	s.mu.Lock()
	if !s.started {
		s.mu.Unlock()
		return ErrNotStarted
	}
	sub := s.sub
	s.stopping = true
	s.mu.Unlock()
	s.checkDropped(ctx, sub)
	if err := sub.Drain(); err != nil && sub.IsValid() {
		_ = sub.Unsubscribe()
	}
	select {
	case <-s.stopped:
		return nil
	case <-ctx.Done():
		s.cancel()
		return ctx.Err()
	}
}

// Stopped is closed when the subscription is closed and every handler has
// returned: after Stop, or a stop nobody asked for (Start's context ended,
// the connection closed), which Err then reports.
func (s *Subscriber[T, R]) Stopped() <-chan struct{} { return s.stopped }

// Err returns why the subscription closed when nobody asked it to (before
// Stop): an error matching ErrStoppedUnasked and its cause
// (nats.ErrConnectionClosed, or context.Cause of Start's context when it
// ended). It returns nil otherwise.
func (s *Subscriber[T, R]) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Stats returns what the subscriber did with its messages so far, in the
// shape every adapter of dedup shares:
//
//	Delivered        messages taken from the subscription and handled (undecodable ones included)
//	Acked            done: processed, duplicate or bypassed (a request replied to with
//	                 its result), or a plain message in flight elsewhere, which its holder finishes
//	RetriedInPlace   requests answered with Dedup-Retry-After: the requester sends them again
//	DeadLettered     dead letters published (acknowledged by their stream; flushed, for
//	                 core dead letters)
//	PoisonDropped    poison dropped without a dead letter (DropPoison)
//	SettleFailures   dead letters and replies that could not be published, results that
//	                 could not be encoded into a reply
//
// Each delivery counts in one of the last five. RetriedLater, Reconnects
// and StaleDeliveries stay 0: core NATS neither retries nor acknowledges,
// and the connection, whose reconnects nats.Conn.Stats counts, is the
// caller's. Two counters are not of deliveries:
//
//	DeadLettersTruncated  dead letters cut (their data, and their original headers if those
//	                      alone were too large) to fit the server's max payload or the
//	                      dead-letter stream's MaxMsgSize
//	SlowConsumerDropped   messages the client dropped past the subscription's pending limits
//	                      (a slow consumer; see Options.PendingMsgsLimit): core NATS does not
//	                      redeliver them, so they are lost, never handed to the receiver nor
//	                      reported to the Observer; each drop is also logged at error level
func (s *Subscriber[T, R]) Stats() dedup.ConsumerStats {
	if sub := s.live.Load(); sub != nil {
		s.checkDropped(context.Background(), sub)
	}
	return s.stats.snapshot()
}

// checkDropped reports messages the client dropped since the last check
// because the subscription's pending limits were exceeded: core NATS has no
// redelivery, so they are gone, and the user must hear of it.
func (s *Subscriber[T, R]) checkDropped(ctx context.Context, sub *natsgo.Subscription) {
	n, err := sub.Dropped()
	if err != nil {
		return // closed: its drops were counted when it was live
	}
	for {
		last := s.dropped.Load()
		if int64(n) <= last {
			return
		}
		if s.dropped.CompareAndSwap(last, int64(n)) {
			s.stats.slowConsumerDropped.Add(uint64(int64(n) - last))
			pm, pb, _ := sub.PendingLimits()
			s.opts.Logger.ErrorContext(ctx, "dedupnats: slow consumer: the client dropped messages past the subscription's pending limits; they are lost",
				slog.String("subject", s.subject), slog.Int64("dropped", int64(n)-last), slog.Int64("dropped_total", int64(n)),
				slog.Int("pending_msgs_limit", pm), slog.Int("pending_bytes_limit", pb))
			return
		}
	}
}

// dispatch runs on the subscription's delivery goroutine: it waits for a
// free worker, so a slow handler slows delivery down (the client buffers
// meanwhile) instead of starting goroutines without bound.
func (s *Subscriber[T, R]) dispatch(ctx context.Context, m *natsgo.Msg) {
	if sub := s.live.Load(); sub != nil {
		s.checkDropped(ctx, sub)
	}
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		<-s.sem
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer func() { <-s.sem }()
		s.handle(ctx, m)
	}()
}

// handle runs one message through the receiver and answers it: one
// delivery, reported to the receiver's Observer once it is settled.
func (s *Subscriber[T, R]) handle(ctx context.Context, m *natsgo.Msg) {
	s.stats.delivered.Add(1)
	env := coreMessage[T](m, s.opts.Fingerprint)
	dlv := deliver(ctx, s.rcv, s.opts.Decoder, env)
	d := dlv.Decision
	if m.Reply == "" && d.Action == delivery.Retry {
		if d.Reason == delivery.ReasonInFlight {
			d = delivery.Decision{Action: delivery.Ack, Reason: delivery.ReasonInFlight}
		} else {
			why := fmt.Errorf("dedupnats: %s, and core NATS does not redeliver", d.Reason)
			if dlv.Err != nil {
				why = fmt.Errorf("%w: %w", why, dlv.Err)
			}
			d = delivery.Decision{Action: delivery.DeadLetter, Reason: ReasonNoRedelivery, Err: why}
		}
	}
	s.settle(m, &dlv, d)
}

// settle publishes a dead letter where d says so and replies to a
// request, both carrying the delivery's trace context, then settles dlv
// with what was done, how long it took and what failed. A done request
// whose result cannot be encoded into a reply is answered with reason
// result-not-stored instead, and the encoding error is the settlement's.
func (s *Subscriber[T, R]) settle(m *natsgo.Msg, dlv *adapter.Delivery[R], d delivery.Decision) {
	ctx := dlv.Context()
	begin := time.Now()
	var err error
	drop := false
	if d.Action == delivery.DeadLetter {
		if s.dl == nil { // DropPoison: Start refuses a subscriber without either
			drop = true
			s.opts.Logger.ErrorContext(ctx, "dedupnats: poison message dropped (DropPoison, no DeadLetterSubject)",
				slog.String("reason", string(d.Reason)), slog.String("subject", m.Subject), slog.String("key", dlv.Result.Key), slog.Any("error", d.Err))
		} else {
			sctx, cancel := settleContext(ctx, s.opts.SettleTimeout)
			err = s.dl.publish(sctx, deadLetter{subject: m.Subject, header: m.Header, data: m.Data, reason: d.Reason, err: d.Err, key: dlv.Result.Key,
				inject: injector(ctx, s.rcv)})
			cancel()
		}
	}
	if m.Reply != "" {
		var reply *natsgo.Msg
		if d.Action == delivery.Ack {
			body, encErr := s.opts.ReplyEncoder.Marshal(dlv.Result.Value)
			if encErr != nil {
				err = fmt.Errorf("dedupnats: encode reply: %w", encErr)
				reply = errorReply(m.Reply, delivery.Decision{Action: delivery.DeadLetter, Reason: delivery.ReasonNotStored, Err: err})
			} else {
				reply = resultReply(m.Reply, dlv.Result.Status, body)
			}
		} else {
			reply = errorReply(m.Reply, d)
		}
		s.rcv.Inject(ctx, reply.Header.Set)
		if rerr := s.nc.PublishMsg(reply); rerr != nil {
			err = cmp.Or(err, fmt.Errorf("dedupnats: reply to %q: %w", m.Subject, rerr))
		}
	}
	took := time.Since(begin)
	if err != nil {
		s.opts.Logger.WarnContext(ctx, "dedupnats: settling a message failed", slog.String("subject", m.Subject), slog.Any("error", err))
	}
	if drop {
		// Dropped without a dead letter: done with, as an ack is, for the
		// poison's reason.
		d = delivery.Decision{Action: delivery.Ack, Reason: d.Reason, Err: d.Err}
	}
	s.stats.count(d, drop, err)
	dlv.Settled(adapter.Settlement{Decision: d, Duration: took, Err: err})
}
