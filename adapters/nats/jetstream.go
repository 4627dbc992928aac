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
// [JetStreamMsg] returns the jetstream.Msg behind it.
type Consumer[T, R any] struct {
	js    jetstream.JetStream
	cons  jetstream.Consumer
	rcv   *dedup.Receiver[*dedup.Message[T], R]
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
	o := opts.withDefaults(rcv.Logger())
	if err := o.validate(); err != nil {
		return nil, err
	}
	c := &Consumer[T, R]{js: js, cons: cons, rcv: rcv, opts: o, stopped: make(chan struct{})}
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
	workCtx, cancel := context.WithCancel(ctx)
	c.cancel = cancel
	c.stopWatch = context.AfterFunc(workCtx, func() {
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
		c.stopWatch()
		cancel()
		close(c.stopped)
	}()
	return nil
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

// Stats returns what the consumer dropped or cut so far.
func (c *Consumer[T, R]) Stats() Stats { return c.stats.snapshot() }

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

// handle runs one message through the receiver and settles it.
func (c *Consumer[T, R]) handle(ctx context.Context, m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		// Not a JetStream delivery: nothing to acknowledge.
		c.opts.Logger.WarnContext(ctx, "dedupnats: message without JetStream metadata ignored", slog.String("subject", m.Subject()), slog.Any("error", err))
		return
	}
	env := jetStreamMessage[T](m, meta, c.opts.Fingerprint)
	res, herr := decodeAndHandle(ctx, c.rcv, c.opts.Decoder, env)
	d := c.rcv.Decide(res, herr)
	if d.Action == dedup.Retry && c.lastDelivery(meta) {
		if d.Reason == dedup.ReasonInFlight {
			res, herr, d = c.awaitHolder(ctx, m, env, res, herr, d)
		}
		if d.Action == dedup.Retry {
			// JetStream would not deliver it again: without a dead letter
			// the message would be lost to this consumer.
			why := fmt.Errorf("dedupnats: %s on delivery %d of at most %d", d.Reason, meta.NumDelivered, c.maxDeliver)
			if herr != nil {
				why = fmt.Errorf("%w: %w", why, herr)
			}
			d = dedup.Decision{Action: dedup.DeadLetter, Reason: ReasonMaxDeliver, Err: why}
		}
	}
	serr := c.settle(ctx, m, meta, env, res.Key, d)
	settled(ctx, c.rcv, env, res, d, serr)
}

// lastDelivery reports whether JetStream will not deliver the message
// again (NumDelivered reached MaxDeliver).
func (c *Consumer[T, R]) lastDelivery(meta *jetstream.MsgMetadata) bool {
	return c.maxDeliver > 0 && meta.NumDelivered >= uint64(c.maxDeliver)
}

// settle tells JetStream what became of the message.
func (c *Consumer[T, R]) settle(ctx context.Context, m jetstream.Msg, meta *jetstream.MsgMetadata, env *dedup.Message[T], key string, d dedup.Decision) error {
	var err error
	switch {
	case d.Action == dedup.Ack && !c.opts.AckSync:
		err = m.Ack() // no context: it does not wait, and a timer per message costs
	case d.Action == dedup.Ack:
		sctx, cancel := settleContext(ctx, c.opts.SettleTimeout)
		err = m.DoubleAck(sctx)
		cancel()
	case d.Action == dedup.Retry:
		err = m.NakWithDelay(max(d.Delay, c.opts.MinRetryDelay))
	case d.Action == dedup.DeadLetter:
		sctx, cancel := settleContext(ctx, c.opts.SettleTimeout)
		err = c.deadLetter(sctx, m, meta, env, key, d)
		cancel()
	}
	if err != nil {
		c.opts.Logger.WarnContext(ctx, "dedupnats: settling a message failed; JetStream will redeliver it",
			slog.String("action", d.Action.String()), slog.String("stream", meta.Stream), slog.Uint64("sequence", meta.Sequence.Stream), slog.Any("error", err))
		return fmt.Errorf("dedupnats: %s %s #%d: %w", d.Action, meta.Stream, meta.Sequence.Stream, err)
	}
	return nil
}

// deadLetter publishes the dead letter, then terminates the message; when
// the publish fails, the message is Nak'd instead (after the receiver's
// StoreRetryDelay), so that nothing is lost. Plain Term, not
// TermWithReason: servers before 2.10 do not know the latter and leave the
// message unacknowledged.
func (c *Consumer[T, R]) deadLetter(ctx context.Context, m jetstream.Msg, meta *jetstream.MsgMetadata, env *dedup.Message[T], key string, d dedup.Decision) error {
	if c.dl == nil { // DropPoison: Start refuses a consumer without either
		c.stats.poisonDropped.Add(1)
		c.opts.Logger.ErrorContext(ctx, "dedupnats: poison message dropped (DropPoison, no DeadLetterSubject)",
			slog.String("reason", string(d.Reason)), slog.String("stream", meta.Stream), slog.Uint64("sequence", meta.Sequence.Stream),
			slog.String("subject", env.Source), slog.String("key", key), slog.Any("error", d.Err))
		return m.Term()
	}
	err := c.dl.publish(ctx, deadLetter{
		subject: env.Source, header: m.Headers(), data: env.Data, reason: d.Reason, err: d.Err, key: key,
		stream: meta.Stream, consumer: meta.Consumer, sequence: meta.Sequence.Stream, numDelivered: meta.NumDelivered,
	})
	if err != nil {
		return errors.Join(err, m.NakWithDelay(c.rcv.StoreRetryDelay()))
	}
	return m.Term()
}
