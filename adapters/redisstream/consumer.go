package dedupredisstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
)

// entry is one pending entry of the stream on its way to an outcome.
type entry struct {
	id     string
	values map[string]any // as read; nil for an entry read back without fields
	fields *fields
	count  int       // the delivery count; 0 unknown
	due    time.Time // not to be handed over before
	// retried says a next-attempt time may be recorded for it (HDEL on
	// its acknowledgement).
	retried bool
	// fresh says it was read as new (XREADGROUP >): nobody else can hold
	// it, and its delivery count is 1.
	fresh bool
}

// Consumer runs a dedup.Receiver over a consumer group of a Redis stream:
// it reads entries in batches (XREADGROUP), decodes each into a
// dedup.Message, hands them to the receiver on a bounded number of
// workers, and settles each one as the receiver's Decide says: XACK, a
// retry held pending until its delay passed, or a dead letter (XADD to
// Options.DeadLetterStream) followed by XACK. It takes over the entries
// other consumers of the group left pending past Options.ClaimIdle
// (XAUTOCLAIM), reports entries deleted while pending (ErrTrimmed), and
// reads the group's lag (XINFO GROUPS) into Stats.
type Consumer[T, R any] struct {
	client        redis.UniversalClient
	stream, group string
	rcv           *adapter.Receiver[*dedup.Message[T], R]
	opts          Options
	retryKey      string // the hash of next-attempt times, by entry id
	lock          nameLock
	stats         counters
	from          *origin

	held  heldSet
	sched scheduler
	work  chan *entry

	mu         sync.Mutex
	started    bool
	stopping   bool
	feedCancel context.CancelFunc // stops reading, claiming and scheduling
	hardCancel context.CancelFunc // cancels the handlers
	stopWatch  func() bool
	feeders    sync.WaitGroup
	workers    sync.WaitGroup
	stopped    chan struct{}
	err        error
}

var _ dedup.Consumer = (*Consumer[struct{}, struct{}])(nil)

// NewConsumer returns a Consumer that feeds the entries of stream, read
// through group, to rcv. opts may be nil for the defaults, but
// DeadLetterStream has none: without it (or DropPoison), NewConsumer fails
// with ErrNoDeadLetter. Bad input is an error matching
// dedup.ErrInvalidConfig, never a panic.
//
// client stays the caller's: the Consumer never closes it, nor deletes the
// group or the stream. A stream is one key, so a Cluster client
// (redis.ClusterClient) works as a single one does.
func NewConsumer[T, R any](client redis.UniversalClient, stream, group string, rcv *dedup.Receiver[*dedup.Message[T], R], opts *Options) (*Consumer[T, R], error) {
	switch {
	case client == nil:
		return nil, wrapConfig("client is nil")
	case stream == "":
		return nil, wrapConfig("stream is empty")
	case group == "":
		return nil, wrapConfig("group is empty")
	case rcv == nil:
		return nil, wrapConfig("receiver is nil")
	}
	b := adapter.Bind(rcv)
	o := opts.withDefaults(b.Logger(), b.Lease())
	if err := o.validate(stream); err != nil {
		return nil, err
	}
	c := &Consumer[T, R]{
		client: client, stream: stream, group: group, rcv: b, opts: o,
		retryKey: stream + ":dedup-retry:" + group,
		lock:     nameLock{key: stream + ":dedup-consumer:" + group + ":" + o.Consumer, token: lockToken()},
		work:     make(chan *entry, o.Batch),
		stopped:  make(chan struct{}),
	}
	c.sched.init()
	c.from = newOrigin(client, group, o.DestinationTemplate, stream)
	return c, nil
}

// Name is the consumer's name in the group (Options.Consumer).
func (c *Consumer[T, R]) Name() string { return c.opts.Consumer }

// Start checks the group (or creates it, with Options.CreateGroup), takes
// the consumer's name, and starts reading and handling entries: first the
// entries still pending to this consumer's name (those a previous run of
// this process left), then new ones. It fails, matching
// dedup.ErrInvalidConfig, when the group does not exist (ErrNoGroup) or
// another live Consumer holds the name (ErrConsumerInUse). A Consumer
// starts once.
//
// ctx is the consumer's lifetime. Its end before Stop is a hard stop
// nobody asked for: reading stops, the handlers' contexts are cancelled,
// and it is logged at error level and reported by Err (ErrStoppedUnasked
// wrapping context.Cause(ctx)). Shut down with Stop, on a context of its
// own.
func (c *Consumer[T, R]) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return ErrStarted
	}
	if err := c.checkGroup(ctx); err != nil {
		return err
	}
	if err := c.lock.acquire(ctx, c.client); err != nil {
		return err
	}
	c.started = true
	hardCtx, hardCancel := context.WithCancel(adapter.WithOrigin(ctx, c.from.fill))
	feedCtx, feedCancel := context.WithCancel(hardCtx)
	c.hardCancel, c.feedCancel = hardCancel, feedCancel
	watched := make(chan struct{})
	c.stopWatch = context.AfterFunc(hardCtx, func() {
		defer close(watched)
		c.mu.Lock()
		if !c.stopping && c.err == nil && ctx.Err() != nil {
			c.err = fmt.Errorf("%w: Start's context ended: %w", ErrStoppedUnasked, context.Cause(ctx))
			c.opts.Logger.ErrorContext(ctx, "dedupredisstream: consumer stopped without Stop",
				slog.String("stream", c.stream), slog.String("group", c.group), slog.Any("error", c.err))
		}
		c.stopping = true
		c.mu.Unlock()
	})
	c.feeders.Go(func() { c.read(feedCtx) })
	c.feeders.Go(func() { c.schedule(feedCtx) })
	c.feeders.Go(func() { c.maintain(feedCtx) })
	for range c.opts.Concurrency {
		c.workers.Go(func() { c.runWorker(hardCtx) })
	}
	go func() { // owned by the feeders and workers: ends when they do
		c.feeders.Wait()
		close(c.work)
		c.workers.Wait()
		c.release()
		if !c.stopWatch() {
			<-watched
		}
		hardCancel()
		close(c.stopped)
	}()
	return nil
}

// checkGroup creates the group (CreateGroup) or checks that it exists.
func (c *Consumer[T, R]) checkGroup(ctx context.Context) error {
	if c.opts.CreateGroup {
		err := c.client.XGroupCreateMkStream(ctx, c.stream, c.group, c.opts.StartID).Err()
		if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
			return fmt.Errorf("dedupredisstream: create group %q of stream %q: %w", c.group, c.stream, err)
		}
		return nil
	}
	groups, err := c.client.XInfoGroups(ctx, c.stream).Result()
	if err != nil && !strings.Contains(err.Error(), "no such key") {
		return fmt.Errorf("dedupredisstream: groups of stream %q: %w", c.stream, err)
	}
	for _, g := range groups {
		if g.Name == c.group {
			c.stats.lag.Store(g.Lag)
			return nil
		}
	}
	return &configError{sentinel: ErrNoGroup, msg: fmt.Sprintf("dedupredisstream: stream %q has no consumer group %q: create it (XGROUP CREATE %s %s 0 MKSTREAM) or set Options.CreateGroup", c.stream, c.group, c.stream, c.group)}
}

// release gives the name back and, when the consumer owns nothing in the
// group any more, removes it from the group: what a clean stop leaves.
func (c *Consumer[T, R]) release() {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.SettleTimeout)
	defer cancel()
	if _, err := delConsumerScript.Run(ctx, c.client, []string{c.stream}, c.group, c.opts.Consumer, 0).Result(); err != nil && !errors.Is(err, redis.Nil) {
		c.opts.Logger.DebugContext(ctx, "dedupredisstream: consumer not removed from its group", slog.Any("error", err))
	}
	c.lock.release(ctx, c.client)
}

// Stop stops reading and claiming, lets the workers finish the entries
// already read, and returns when they are done. Entries waiting for a
// retry's delay stay pending: the next run of this process (same name), or
// another consumer after ClaimIdle, takes them up when their delay has
// passed. When ctx ends first, the handlers' contexts are cancelled (their
// entries stay pending) and Stop returns ctx's error; Stopped tells when the
// workers are gone.
func (c *Consumer[T, R]) Stop(ctx context.Context) error {
	c.mu.Lock()
	if !c.started {
		c.mu.Unlock()
		return ErrNotStarted
	}
	c.stopping = true
	c.feedCancel()
	c.mu.Unlock()
	select {
	case <-c.stopped:
		return nil
	case <-ctx.Done():
		c.hardCancel()
		return ctx.Err()
	}
}

// Stopped is closed when the consumer has stopped: after Stop, or a stop
// nobody asked for, which Err then reports.
func (c *Consumer[T, R]) Stopped() <-chan struct{} { return c.stopped }

// Err returns why the consumer stopped when nobody asked it to (before
// Stop): an error matching ErrStoppedUnasked and its cause. It returns nil
// otherwise.
func (c *Consumer[T, R]) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Stats returns what the consumer did with its deliveries so far, in the
// shape every adapter of dedup shares:
//
//	Delivered        entries handed to the receiver (undecodable ones included)
//	Acked            XACKs of entries whose effect happened (processed, duplicate, bypassed)
//	RetriedInPlace   retries: the entry kept pending, handed over again after its delay
//	DeadLettered     dead letters added (XADD returned), the original then acknowledged
//	PoisonDropped    poison acknowledged without a dead letter (DropPoison)
//	SettleFailures   XACKs, dead letters and retry records that failed: the entry is tried again
//	Reconnects       reads that succeeded again after the connection failed
//	Trimmed          pending entries deleted from the stream before they were handled: lost
//	Lag              the group's lag, as XINFO GROUPS last said (-1: Redis cannot tell)
//
// RetriedLater, DeadLettersTruncated, SlowConsumerDropped and
// StaleDeliveries stay 0.
func (c *Consumer[T, R]) Stats() dedup.ConsumerStats { return c.stats.snapshot() }

// ended records why reading ended when nobody asked it to, and stops the
// consumer.
func (c *Consumer[T, R]) ended(ctx context.Context, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping {
		return
	}
	c.stopping = true
	c.err = fmt.Errorf("%w: %w", ErrStoppedUnasked, err)
	c.opts.Logger.ErrorContext(ctx, "dedupredisstream: consumer stopped without Stop", slog.String("stream", c.stream),
		slog.String("group", c.group), slog.Any("error", err))
	c.feedCancel()
}

// read is the reader: the entries pending to this consumer's name first
// (XREADGROUP from 0, what an earlier run of this process left), then new
// entries (XREADGROUP >), a batch at a time, until ctx ends.
func (c *Consumer[T, R]) read(ctx context.Context) {
	cursor := "0"
	failing := false
	delay := c.opts.MinRetryDelay
	for ctx.Err() == nil {
		block := time.Duration(-1)
		if cursor == ">" {
			block = c.opts.Block
		}
		res, err := c.client.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: c.group, Consumer: c.opts.Consumer, Streams: []string{c.stream, cursor},
			Count: int64(c.opts.Batch), Block: block,
		}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			if ctx.Err() != nil {
				return
			}
			if isNoGroup(err) {
				if !c.opts.CreateGroup {
					c.ended(ctx, fmt.Errorf("%w: %w", ErrNoGroup, err))
					return
				}
				c.opts.Logger.ErrorContext(ctx, "dedupredisstream: the group is gone (a Redis restarted without persistence, a group deleted); creating it again",
					slog.String("stream", c.stream), slog.String("group", c.group), slog.Any("error", err))
				_ = c.checkGroup(ctx)
			}
			if !failing {
				c.opts.Logger.WarnContext(ctx, "dedupredisstream: read failed; trying again", slog.String("stream", c.stream), slog.Any("error", err))
			}
			failing = true
			if !sleep(ctx, delay) {
				return
			}
			delay = min(2*delay, time.Second)
			continue
		}
		if failing {
			failing = false
			delay = c.opts.MinRetryDelay
			c.stats.reconnects.Add(1)
			c.opts.Logger.InfoContext(ctx, "dedupredisstream: reading again", slog.String("stream", c.stream))
		}
		var msgs []redis.XMessage
		if len(res) > 0 {
			msgs = res[0].Messages
		}
		if cursor != ">" {
			if len(msgs) == 0 {
				cursor = ">"
				continue
			}
			cursor = msgs[len(msgs)-1].ID
			// Pending since an earlier run: who knows what happened to
			// them since (a retry's delay, a deletion); the scheduler
			// checks.
			now := time.Now()
			for _, m := range msgs {
				if c.held.add(m.ID) {
					c.sched.add(&entry{id: m.ID, values: m.Values, fields: fieldsOf(m.Values), due: now})
				}
			}
			continue
		}
		for _, m := range msgs {
			c.held.add(m.ID)
			e := &entry{id: m.ID, values: m.Values, fields: fieldsOf(m.Values), count: 1, fresh: true}
			if !c.dispatch(ctx, e) {
				return
			}
		}
	}
}

// dispatch hands e to the workers, and reports whether it could before ctx
// ended (it then stays pending, for the next run or another consumer).
func (c *Consumer[T, R]) dispatch(ctx context.Context, e *entry) bool {
	select {
	case c.work <- e:
		return true
	case <-ctx.Done():
		c.held.remove(e.id)
		return false
	}
}

// runWorker handles entries until the feeders are done; after a hard stop,
// what is left in the queue stays pending.
func (c *Consumer[T, R]) runWorker(ctx context.Context) {
	for e := range c.work {
		if ctx.Err() != nil {
			c.held.remove(e.id)
			continue
		}
		c.handle(ctx, e)
	}
}

func isNoGroup(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOGROUP")
}

// sleep waits d, or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
