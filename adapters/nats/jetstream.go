package dedupnats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Consumer runs a dedup.Receiver over a JetStream pull consumer: it fetches
// messages, decodes each into a dedup.Message, hands them to the receiver on
// a bounded number of workers, and settles each one as the receiver's
// Decide says (Ack, NakWithDelay, or a dead letter followed by Term).
//
// The envelope's Source is the subject, Stream and Offset the stream and
// stream sequence, DeliveryCount JetStream's NumDelivered (1 on the first
// delivery), ID the Nats-Msg-Id header, and its heartbeat is InProgress.
// [NativeJetStream] returns the jetstream.Msg behind it.
type Consumer[T, R any] struct {
	js    jetstream.JetStream
	cons  jetstream.Consumer
	rcv   *adapter.Receiver[*dedup.Message[T], R]
	opts  Options
	dl    *deadLetterer
	stats counters

	mu         sync.Mutex
	started    bool
	stopping   bool // Stop was called, or the stop was already recorded in err
	maxDeliver int
	ackWait    time.Duration // the shortest of the consumer's AckWait and BackOff
	iter       jetstream.MessagesContext
	cancel     context.CancelFunc // cancels handlers: the hard stop
	stopWatch  func() bool        // undoes the watch on Start's ctx
	wg         sync.WaitGroup
	stopped    chan struct{}
	err        error // what ended fetching, if not Stop
}

var _ dedup.Consumer = (*Consumer[struct{}, struct{}])(nil)

// NewConsumer returns a Consumer that feeds the messages of cons to rcv. js
// is the JetStream context cons belongs to; it publishes dead letters.
// opts may be nil for the defaults, but DeadLetterSubject has none: without
// it (or DropPoison), NewConsumer fails with ErrNoDeadLetter. Bad input is
// an error matching dedup.ErrInvalidConfig, never a panic.
//
// js, its connection and cons stay the caller's: the Consumer never closes
// the connection nor deletes the JetStream consumer, not even on Stop or a
// hard stop; it stops only the message iterator it made. Close the
// connection after Stop returns.
func NewConsumer[T, R any](js jetstream.JetStream, cons jetstream.Consumer, rcv *dedup.Receiver[*dedup.Message[T], R], opts *Options) (*Consumer[T, R], error) {
	switch {
	case js == nil:
		return nil, wrapConfig("JetStream is nil")
	case cons == nil:
		return nil, wrapConfig("consumer is nil")
	case rcv == nil:
		return nil, wrapConfig("receiver is nil")
	}
	b := adapter.Bind(rcv)
	o := opts.withDefaults(b.Logger())
	if err := o.validate(); err != nil {
		return nil, err
	}
	c := &Consumer[T, R]{js: js, cons: cons, rcv: b, opts: o, stopped: make(chan struct{})}
	if o.DeadLetterSubject != "" {
		c.dl = &deadLetterer{subject: o.DeadLetterSubject, nc: js.Conn(), js: js, stats: &c.stats}
	}
	return c, nil
}

// Start checks the consumer and the dead-letter subject, then starts
// fetching and handling messages, and returns once the workers run. It
// fails, matching dedup.ErrInvalidConfig, when the consumer does not use
// explicit acks (ErrAckPolicy), when no stream of its own captures the
// DeadLetterSubject (ErrDeadLetterStream), and, with StrictHorizon, when
// the redelivery horizon or AckWait does not fit the receiver
// (ErrHorizon; a warning otherwise). A Consumer starts once.
//
// ctx is the consumer's lifetime. Its end before Stop is a hard stop
// nobody asked for: fetching stops, the handlers' contexts are cancelled,
// and it is logged at error level and reported by Err (ErrStoppedUnasked
// wrapping context.Cause(ctx)). Shut down with Stop, on a context of its
// own.
func (c *Consumer[T, R]) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return ErrStarted
	}
	info, err := c.cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("dedupnats: consumer info: %w", err)
	}
	if info.Config.AckPolicy != jetstream.AckExplicitPolicy {
		return &configError{sentinel: ErrAckPolicy, msg: fmt.Sprintf("dedupnats: consumer %q acks with %v: a retry or a dead letter of one message would settle others with it (AckAll) or never happen (AckNone); use AckExplicitPolicy", info.Name, info.Config.AckPolicy)}
	}
	lim := horizonLimits{retention: c.rcv.Retention(), lease: c.rcv.Lease(), longestNak: longestNak(c.rcv, c.opts.MinRetryDelay)}
	if problem := checkHorizon(info.Name, info.Config, lim); problem != "" {
		if c.opts.StrictHorizon {
			return &configError{sentinel: ErrHorizon, msg: "dedupnats: " + problem}
		}
		c.opts.Logger.WarnContext(ctx, "dedupnats: "+problem)
	}
	if c.dl != nil { // else DropPoison: NewConsumer refuses neither
		s, err := c.js.Stream(ctx, info.Stream)
		if err != nil {
			return fmt.Errorf("dedupnats: stream %q: %w", info.Stream, err)
		}
		c.dl.origin = strconv.FormatInt(s.CachedInfo().Created.UnixNano(), 36)
		if err := c.dl.resolve(ctx, info.Stream, c.opts.CoreDeadLetters, c.opts.Logger); err != nil {
			return err
		}
	}
	iter, err := c.cons.Messages(
		jetstream.PullMaxMessages(c.opts.Prefetch),
		jetstream.WithMessagesErrOnMissingHeartbeat(false),
	)
	if err != nil {
		return fmt.Errorf("dedupnats: consume: %w", err)
	}
	c.started = true
	c.maxDeliver = info.Config.MaxDeliver
	c.ackWait = shortestAckWait(info.Config)
	c.iter = iter
	workCtx, cancel := context.WithCancel(adapter.WithOrigin(ctx, c.origin(ctx, info).fill))
	c.cancel = cancel
	watched := make(chan struct{}) // closed once the watch below ran
	c.stopWatch = context.AfterFunc(workCtx, func() {
		defer close(watched)
		c.mu.Lock()
		if !c.stopping && c.err == nil && ctx.Err() != nil {
			// Start's context ended and nobody called Stop: a hard stop
			// the user did not ask for (a timeout meant for something
			// else, a Stop forgotten), which must not go unheard.
			c.err = fmt.Errorf("%w: Start's context ended: %w", ErrStoppedUnasked, context.Cause(ctx))
			c.opts.Logger.ErrorContext(ctx, "dedupnats: consumer stopped without Stop",
				slog.String("consumer", info.Name), slog.Any("error", c.err))
		}
		c.stopping = true
		c.mu.Unlock()
		iter.Stop()
	})
	for range c.opts.Concurrency {
		c.wg.Go(func() { c.work(workCtx) })
	}
	go func() { // owned by the workers: ends when the last one does
		c.wg.Wait()
		if !c.stopWatch() {
			<-watched // Err holds what the watch records before Stopped closes
		}
		cancel()
		close(c.stopped)
	}()
	return nil
}

// origin is what the consumer tells of its deliveries besides their
// messages: the server, the JetStream consumer's name as the group, and
// the template of each subject (Options.DestinationTemplate, else the
// consumer's filter subject it matches, else the stream's subject, else
// the stream's name).
func (c *Consumer[T, R]) origin(ctx context.Context, info *jetstream.ConsumerInfo) *origin {
	patterns := info.Config.FilterSubjects
	if info.Config.FilterSubject != "" {
		patterns = append([]string{info.Config.FilterSubject}, patterns...)
	}
	if len(patterns) == 0 && c.opts.DestinationTemplate == "" {
		if s, err := c.js.Stream(ctx, info.Stream); err == nil {
			patterns = s.CachedInfo().Config.Subjects
		} else {
			c.opts.Logger.DebugContext(ctx, "dedupnats: no stream info: the destination's template is the stream's name",
				slog.String("stream", info.Stream), slog.Any("error", err))
		}
	}
	return &origin{
		server:    &connServer{nc: c.js.Conn()},
		group:     info.Name,
		templates: subjectTemplates(c.opts.DestinationTemplate, patterns, info.Stream),
	}
}

// Stop stops fetching, lets the workers finish the messages already
// fetched, and returns when they are done. When ctx ends first, the
// handlers' contexts are cancelled (their messages are Nak'd for a later
// redelivery) and Stop returns ctx's error; Stopped tells when the workers
// are gone.
func (c *Consumer[T, R]) Stop(ctx context.Context) error {
	c.mu.Lock()
	if !c.started {
		c.mu.Unlock()
		return ErrNotStarted
	}
	c.stopping = true
	c.iter.Drain()
	c.mu.Unlock()
	select {
	case <-c.stopped:
		return nil
	case <-ctx.Done():
		c.cancel()
		c.iter.Stop()
		return ctx.Err()
	}
}

// Stopped is closed when the consumer has stopped: after Stop, or a stop
// nobody asked for (Start's context ended, the consumer or its stream
// deleted, the connection closed), which Err then reports.
func (c *Consumer[T, R]) Stopped() <-chan struct{} { return c.stopped }

// Err returns why fetching ended when nobody asked it to (before Stop): an
// error matching ErrStoppedUnasked and its cause (jetstream.ErrConsumerDeleted
// when the consumer or its stream was deleted, nats.ErrConnectionClosed,
// or context.Cause of Start's context when it ended). It returns nil
// otherwise.
func (c *Consumer[T, R]) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Stats returns what the consumer did with its deliveries so far, in the
// shape every adapter of dedup shares:
//
//	Delivered        JetStream deliveries fetched and handled (undecodable ones included)
//	Acked            Acks (DoubleAcks with AckSync) that went out
//	RetriedInPlace   NakWithDelays, and the holds of a last delivery waiting for the key's holder
//	DeadLettered     dead letters the dead-letter stream acknowledged, the message then terminated
//	PoisonDropped    poison terminated without a dead letter (DropPoison)
//	SettleFailures   Acks, Naks, Terms and dead-letter publishes that failed: JetStream redelivers
//
//	DeadLettersTruncated  dead letters cut (their data, and their original headers if those
//	                      alone were too large) to fit the server's max payload or the
//	                      dead-letter stream's MaxMsgSize
//
// RetriedLater, Reconnects, SlowConsumerDropped and StaleDeliveries stay
// 0: JetStream retries by redelivery and does not drop what a consumer
// has not fetched, and the connection, whose reconnects nats.Conn.Stats
// counts, is the caller's.
func (c *Consumer[T, R]) Stats() dedup.ConsumerStats { return c.stats.snapshot() }

// work is one worker: it takes the next message and handles it until the
// iterator closes. An iterator that closes, or fails for good, without a
// stop someone asked for is recorded as the consumer's Err.
func (c *Consumer[T, R]) work(ctx context.Context) {
	for {
		m, err := c.iter.Next()
		if err == nil {
			c.handle(ctx, m)
			continue
		}
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
			errors.Is(err, jetstream.ErrConnectionClosed) || errors.Is(err, natsgo.ErrConnectionClosed) || errors.Is(err, jetstream.ErrBadRequest) {
			c.ended(ctx, err)
			return
		}
		// A transient fetch error (a missed heartbeat, a leader change):
		// the iterator retries its pulls; pause briefly so a persistent
		// error does not spin.
		c.opts.Logger.WarnContext(ctx, "dedupnats: fetch failed", slog.Any("error", err))
		t := time.NewTimer(c.opts.MinRetryDelay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}

// ended records why the iterator ended, unless a stop was asked for or
// already recorded. The first worker to see the cause (the others see the
// iterator closed) records it, logged once at error level.
func (c *Consumer[T, R]) ended(ctx context.Context, err error) {
	c.iter.Stop() // a terminal error leaves the other workers waiting otherwise
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping {
		return
	}
	if c.js.Conn().IsClosed() && !errors.Is(err, natsgo.ErrConnectionClosed) && !errors.Is(err, jetstream.ErrConnectionClosed) {
		err = fmt.Errorf("%w: %w", err, natsgo.ErrConnectionClosed)
	}
	if c.err == nil || (errors.Is(c.err, jetstream.ErrMsgIteratorClosed) && !errors.Is(err, jetstream.ErrMsgIteratorClosed)) {
		first := c.err == nil
		c.err = fmt.Errorf("%w: fetch: %w", ErrStoppedUnasked, err)
		if first {
			c.opts.Logger.ErrorContext(ctx, "dedupnats: consumer stopped without Stop", slog.Any("error", err))
		}
	}
}

// handle runs one message through the receiver and settles it: one
// delivery, reported to the receiver's Observer once it is settled (more
// than one when its last delivery waits for the key's holder).
func (c *Consumer[T, R]) handle(ctx context.Context, m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		// Not a JetStream delivery: nothing to acknowledge, nothing handed
		// to the receiver.
		c.opts.Logger.WarnContext(ctx, "dedupnats: message without JetStream metadata ignored", slog.String("subject", m.Subject()), slog.Any("error", err))
		return
	}
	c.stats.delivered.Add(1)
	env := jetStreamMessage[T](m, meta, c.opts.Fingerprint)
	dlv := deliver(ctx, c.rcv, c.opts.Decoder, env)
	if dlv.Decision.Action == delivery.Retry && c.lastDelivery(meta) && dlv.Decision.Reason == delivery.ReasonInFlight {
		dlv = c.awaitHolder(ctx, m, env, dlv)
	}
	d := dlv.Decision
	if d.Action == delivery.Retry && c.lastDelivery(meta) {
		// JetStream would not deliver it again: without a dead letter the
		// message would be lost to this consumer.
		why := fmt.Errorf("dedupnats: %s on delivery %d of at most %d", d.Reason, meta.NumDelivered, c.maxDeliver)
		if dlv.Err != nil {
			why = fmt.Errorf("%w: %w", why, dlv.Err)
		}
		d = delivery.Decision{Action: delivery.DeadLetter, Reason: ReasonMaxDeliver, Err: why}
	}
	c.settle(m, meta, env, &dlv, d)
}

// lastDelivery reports whether JetStream will not deliver the message
// again (NumDelivered reached MaxDeliver).
func (c *Consumer[T, R]) lastDelivery(meta *jetstream.MsgMetadata) bool {
	return c.maxDeliver > 0 && meta.NumDelivered >= uint64(c.maxDeliver)
}

// settle tells JetStream what became of the message, as d says (Ack,
// NakWithDelay, a dead letter then Term, or Term alone under DropPoison),
// and settles dlv with what was done, how long it took and what failed.
// It runs under the delivery's context, which the dead letter's trace
// context and the logs come from.
func (c *Consumer[T, R]) settle(m jetstream.Msg, meta *jetstream.MsgMetadata, env *dedup.Message[T], dlv *adapter.Delivery[R], d delivery.Decision) {
	ctx := dlv.Context()
	begin := time.Now()
	var err error
	drop := false
	switch {
	case d.Action == delivery.Ack && !c.opts.AckSync:
		err = m.Ack() // no context: it does not wait, and a timer per message costs
	case d.Action == delivery.Ack:
		sctx, cancel := settleContext(ctx, c.opts.SettleTimeout)
		err = m.DoubleAck(sctx)
		cancel()
	case d.Action == delivery.Retry:
		err = m.NakWithDelay(max(d.Delay, c.opts.MinRetryDelay))
	case d.Action == delivery.DeadLetter && c.dl == nil: // DropPoison: Start refuses a consumer without either
		drop = true
		err = m.Term()
	case d.Action == delivery.DeadLetter:
		sctx, cancel := settleContext(ctx, c.opts.SettleTimeout)
		err = c.deadLetter(sctx, m, meta, env, dlv.Result.Key, d)
		cancel()
	}
	took := time.Since(begin)
	if err != nil {
		what := d.Action.String()
		if drop {
			what = "term"
		}
		c.opts.Logger.WarnContext(ctx, "dedupnats: settling a message failed; JetStream will redeliver it",
			slog.String("action", what), slog.String("stream", meta.Stream), slog.Uint64("sequence", meta.Sequence.Stream), slog.Any("error", err))
		err = fmt.Errorf("dedupnats: %s %s #%d: %w", what, meta.Stream, meta.Sequence.Stream, err)
	}
	if drop {
		if err == nil {
			c.opts.Logger.ErrorContext(ctx, "dedupnats: poison message dropped (DropPoison, no DeadLetterSubject)",
				slog.String("reason", string(d.Reason)), slog.String("stream", meta.Stream), slog.Uint64("sequence", meta.Sequence.Stream),
				slog.String("subject", env.Source), slog.String("key", dlv.Result.Key), slog.Any("error", d.Err))
		}
		// Terminated without a dead letter: done with, as an ack is, for
		// the poison's reason.
		d = delivery.Decision{Action: delivery.Ack, Reason: d.Reason, Err: d.Err}
	}
	c.stats.count(d, drop, err)
	dlv.Settled(adapter.Settlement{Decision: d, Duration: took, Err: err})
}

// deadLetter publishes the dead letter, carrying the delivery's trace
// context (ctx), then terminates the message; when the publish fails, the
// message is Nak'd instead (after the receiver's StoreRetryDelay), so that
// nothing is lost. Plain Term, not TermWithReason: servers before 2.10 do
// not know the latter and leave the message unacknowledged.
func (c *Consumer[T, R]) deadLetter(ctx context.Context, m jetstream.Msg, meta *jetstream.MsgMetadata, env *dedup.Message[T], key string, d delivery.Decision) error {
	err := c.dl.publish(ctx, deadLetter{
		subject: env.Source, header: m.Headers(), data: env.Data, reason: d.Reason, err: d.Err, key: key,
		stream: meta.Stream, consumer: meta.Consumer, sequence: meta.Sequence.Stream, numDelivered: meta.NumDelivered,
		inject: injector(ctx, c.rcv),
	})
	if err != nil {
		return errors.Join(err, m.NakWithDelay(c.rcv.StoreRetryDelay()))
	}
	return m.Term()
}
