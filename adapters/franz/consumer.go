package dedupfranz

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
)

// counters are the Consumer's [dedup.ConsumerStats], shared with its
// committer.
type counters struct {
	delivered, acked, retriedInPlace, retriedLater, deadLettered, poisonDropped, settleFailures, stale atomic.Uint64
}

// Consumer runs a dedup.Receiver over a Kafka consumer group read by a
// franz-go client (kgo) the Consumer builds from the caller's options: it
// polls records, decodes each into a dedup.Message, hands each partition's
// records to the receiver in offset order, partitions concurrently, and
// settles each as the receiver's Decide says: Ack lets the partition's
// watermark move past it, Retry retries it in place after the decision's
// delay (or, with Options.RetryTopics, writes it to a retry topic first),
// DeadLetter writes it to the dead-letter topic first. Each partition's
// watermark is committed every Options.CommitInterval, and when the
// partition is revoked.
//
// The envelope's Source and Stream are the topic, Partition and Offset the
// record's, Header its record headers ([Header]), Timestamp its time.
// [Native] returns the *kgo.Record behind it.
type Consumer[T, R any] struct {
	kopts  []kgo.Opt
	group  string
	topics []string
	rcv    *adapter.Receiver[*dedup.Message[T], R]
	opts   Options
	sem    chan struct{}
	stats  *counters

	mu          sync.Mutex
	started     bool
	client      *kgo.Client
	parts       map[tp]*partition // the partitions this member owns
	workCtx     context.Context
	stopping    chan struct{} // closed when stopping: no new batch, no retry wait
	stopOnce    sync.Once
	cancelPoll  context.CancelFunc
	cancelWork  context.CancelFunc // cancels handlers: the hard stop
	workers     sync.WaitGroup
	stopped     chan struct{}
	err         error // why the consumer stopped when nobody asked it to (matches ErrStoppedUnasked)
	committer   *committer
	onRebalance func(event string, parts map[string][]int32) // tests: called when a callback ends
}

var _ dedup.Consumer = (*Consumer[struct{}, struct{}])(nil)

// NewConsumer returns a Consumer that reads topics in the consumer group
// group, through a kgo.Client built at Start from opts (seed brokers, TLS,
// SASL, timeouts, balancers, kgo.InstanceID: what the caller chooses)
// and the group options the Consumer owns, added after them:
// kgo.ConsumerGroup(group), kgo.ConsumeTopics(topics...),
// kgo.DisableAutoCommit, kgo.BlockRebalanceOnPoll, and its
// OnPartitionsAssigned, OnPartitionsRevoked and OnPartitionsLost.
//
// NewConsumer builds a client from opts once, without the group, to check
// them, and refuses, with an error matching ErrClientConfig (and
// dedup.ErrInvalidConfig), options kgo refuses and options that set what
// the Consumer owns: a consumer group, topics or partitions to consume, a
// share group, BlockRebalanceOnPoll, a callback of the three, or
// RequiredAcks other than kgo.AllISRAcks (dead letters and retry copies
// are produced with the client, and must be stored by every in-sync
// replica before their original is committed).
//
// A nil *Options is the zero Options: every field takes its default, but
// where poison goes has none, so a nil *Options is refused, as are
// Options that set neither Options.DeadLetterTopic nor Options.DropPoison,
// with an error matching dedup.ErrInvalidConfig that names both.
//
// The client is the Consumer's: Stop closes it, once the final commit is
// made (leaving the group, unless opts has a kgo.InstanceID).
func NewConsumer[T, R any](opts []kgo.Opt, group string, topics []string, rcv *dedup.Receiver[*dedup.Message[T], R], o *Options) (*Consumer[T, R], error) {
	switch {
	case group == "":
		return nil, wrapConfig("group is empty: offsets are committed in a consumer group")
	case len(topics) == 0:
		return nil, wrapConfig("no topics")
	case slices.Contains(topics, ""):
		return nil, wrapConfig("a topic is empty")
	case rcv == nil:
		return nil, wrapConfig("receiver is nil")
	}
	b := adapter.Bind(rcv)
	op := o.withDefaults(b.Logger())
	if err := op.validate(); err != nil {
		return nil, err
	}
	if err := checkClientOpts(opts); err != nil {
		return nil, err
	}
	return &Consumer[T, R]{
		kopts:    slices.Clone(opts),
		group:    group,
		topics:   slices.Clone(topics),
		rcv:      b,
		opts:     op,
		sem:      make(chan struct{}, op.Concurrency),
		stats:    &counters{},
		parts:    map[tp]*partition{},
		stopping: make(chan struct{}),
		stopped:  make(chan struct{}),
	}, nil
}

// checkClientOpts builds a client of opts alone (it connects to nothing
// until asked), reads what the Consumer needs from it, and closes it.
func checkClientOpts(opts []kgo.Opt) error {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return &configError{ErrClientConfig, "dedupfranz: the kgo options are refused: " + err.Error()}
	}
	defer cl.Close()
	owned := func(name string) error {
		return &configError{ErrClientConfig, "dedupfranz: the kgo options set " + name + ", which the Consumer sets itself (see NewConsumer)"}
	}
	if g, _ := cl.OptValue(kgo.ConsumerGroup).(string); g != "" {
		return owned("ConsumerGroup")
	}
	if v := reflect.ValueOf(cl.OptValue(kgo.ConsumeTopics)); (v.Kind() == reflect.Map || v.Kind() == reflect.Slice) && v.Len() > 0 {
		return owned("ConsumeTopics")
	}
	if ps, _ := cl.OptValue(kgo.ConsumePartitions).(map[string]map[int32]kgo.Offset); len(ps) > 0 {
		return owned("ConsumePartitions")
	}
	if g, _ := cl.OptValue(kgo.ShareGroup).(string); g != "" {
		return owned("ShareGroup")
	}
	if b, _ := cl.OptValue(kgo.BlockRebalanceOnPoll).(bool); b {
		return owned("BlockRebalanceOnPoll")
	}
	for name, opt := range map[string]any{"OnPartitionsAssigned": kgo.OnPartitionsAssigned, "OnPartitionsRevoked": kgo.OnPartitionsRevoked, "OnPartitionsLost": kgo.OnPartitionsLost} {
		if v := cl.OptValue(opt); v != nil && !isNilFunc(v) {
			return owned(name)
		}
	}
	if acks, ok := cl.OptValue(kgo.RequiredAcks).(kgo.Acks); ok && acks != kgo.AllISRAcks() {
		return &configError{ErrClientConfig, "dedupfranz: the kgo options set RequiredAcks other than AllISRAcks: a dead letter or retry copy could be lost after its original was committed"}
	}
	return nil
}

// isNilFunc reports whether v, an option's value, is a nil callback.
func isNilFunc(v any) bool {
	switch f := v.(type) {
	case func(context.Context, *kgo.Client, map[string][]int32):
		return f == nil
	}
	return false
}

// Start checks the dead-letter topic (it must exist: ErrDeadLetterTopic),
// the retry topics (ErrRetryTopics) and the topics' redelivery horizon
// against the receiver's retention (see Options.StrictHorizon), builds the
// client, which joins the group, and starts polling and handling records.
// It returns once polling runs. A Consumer starts once.
//
// ctx is the consumer's life, not Start's: when it ends without Stop, that
// is a hard stop nobody asked for: polling stops, the handlers' contexts
// are cancelled, the watermarks are committed, the client is closed, the
// stop is logged at error level, and Err returns an error matching
// ErrStoppedUnasked that wraps context.Cause(ctx). To stop, call Stop, with
// a context of its own.
func (c *Consumer[T, R]) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return ErrStarted
	}
	if err := c.checkTopics(ctx); err != nil {
		return err
	}
	admin, err := kgo.NewClient(c.kopts...)
	if err != nil {
		return &configError{ErrClientConfig, "dedupfranz: the kgo options are refused: " + err.Error()}
	}
	seeds, _ := admin.OptValue(kgo.SeedBrokers).([]string)
	admin.Close()
	workCtx, cancelWork := context.WithCancel(adapter.WithOrigin(ctx, c.origin(seeds)))
	pollCtx, cancelPoll := context.WithCancel(workCtx)
	c.workCtx, c.cancelWork, c.cancelPoll = workCtx, cancelWork, cancelPoll
	kopts := append(slices.Clone(c.kopts),
		kgo.ConsumerGroup(c.group),
		kgo.ConsumeTopics(c.topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(c.assigned),
		kgo.OnPartitionsRevoked(c.revoked),
		kgo.OnPartitionsLost(c.lost),
	)
	// The committer exists before the client: the group's callbacks, which
	// use it, may run as soon as the client is built.
	c.committer = newCommitter(c.opts, c.stats, c.owned)
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		cancelWork()
		return &configError{ErrClientConfig, "dedupfranz: the kgo options are refused: " + err.Error()}
	}
	c.client = cl
	c.committer.setClient(cl)
	c.committer.start()
	c.started = true
	polled := make(chan struct{})
	go func() { // the poll loop, owned by the consumer: ends with pollCtx
		defer close(polled)
		c.poll(pollCtx)
		if pollCtx.Err() != nil && !c.stoppingNow() {
			// Only ctx ends pollCtx before beginStop: a hard stop.
			c.stoppedUnasked(ctx, fmt.Errorf("the context given to Start ended: %w", context.Cause(ctx)))
		}
	}()
	go func() { // the shutdown, owned by the consumer: ends after polling does
		<-polled
		c.beginStop()
		c.workers.Wait()
		c.committer.stop()
		// Leaves the group (without an InstanceID): OnPartitionsRevoked runs
		// once more, finds every worker gone and every watermark committed.
		cl.CloseAllowingRebalance()
		cancelWork()
		close(c.stopped)
	}()
	return nil
}

// owned appends the partitions this member owns to parts.
func (c *Consumer[T, R]) owned(parts []*partition) []*partition {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.AppendSeq(parts, maps.Values(c.parts))
}

// poll hands polled records to their partitions until ctx ends. Polls
// block rebalances (kgo.BlockRebalanceOnPoll) only from the moment a poll
// returned records until they are in their partitions' queues, which
// never waits: AllowRebalance follows each dispatch. So a rebalance's
// callbacks never run between a poll and its dispatch (no record of a
// revoked partition reaches a new assignment of it), and never wait for a
// handler.
func (c *Consumer[T, R]) poll(ctx context.Context) {
	for {
		fs := c.client.PollFetches(ctx)
		if fs.IsClientClosed() || ctx.Err() != nil {
			c.client.AllowRebalance()
			return
		}
		fs.EachError(func(topic string, part int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			c.opts.Logger.WarnContext(ctx, "dedupfranz: fetching failed; the client fetches again by itself",
				slog.String("topic", topic), slog.Int("partition", int(part)), slog.Any("error", err))
		})
		fs.EachPartition(func(ftp kgo.FetchTopicPartition) {
			if len(ftp.Records) > 0 {
				c.dispatch(ftp.Topic, ftp.Partition, ftp.Records)
			}
		})
		c.client.AllowRebalance()
	}
}

// dispatch appends records to their partition's queue, and pauses the
// partition alone once PartitionBuffer records wait in it. It never
// blocks.
func (c *Consumer[T, R]) dispatch(topic string, part int32, records []*kgo.Record) {
	c.mu.Lock()
	p := c.parts[tp{topic, part}]
	c.mu.Unlock()
	if p == nil {
		return // not (or no longer) owned: kgo fetches it again for its owner
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.isFenced.Load() {
		return
	}
	p.queue = append(p.queue, records...)
	if len(p.queue) >= c.opts.PartitionBuffer && !p.paused {
		p.paused = true
		c.client.PauseFetchPartitions(map[string][]int32{topic: {part}})
	}
	select {
	case p.ready <- struct{}{}:
	default:
	}
}

// take moves up to n records of p's queue into batch, and resumes p's
// fetching once half its buffer is free.
func (c *Consumer[T, R]) take(p *partition, batch []*kgo.Record, n int) []*kgo.Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := min(n, len(p.queue))
	batch = append(batch, p.queue[:k]...)
	clear(p.queue[:k])
	p.queue = p.queue[k:]
	if len(p.queue) == 0 {
		p.queue = nil // the backing array goes with its last record
	} else {
		select { // more to take
		case p.ready <- struct{}{}:
		default:
		}
	}
	if p.paused && !p.isFenced.Load() && len(p.queue) <= c.opts.PartitionBuffer/2 {
		p.paused = false
		c.client.ResumeFetchPartitions(map[string][]int32{p.id.topic: {p.id.partition}})
	}
	return batch
}

// assigned is OnPartitionsAssigned: each newly assigned partition gets a
// worker of its own (none once the consumer stops).
func (c *Consumer[T, R]) assigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	c.committer.mu.Lock()
	c.mu.Lock()
	for topic, parts := range assigned {
		for _, part := range parts {
			id := tp{topic, part}
			if old := c.parts[id]; old != nil {
				old.fence()
			}
			p := newPartition(id)
			c.parts[id] = p
			if c.stoppingNow() {
				close(p.done)
				continue
			}
			c.workers.Go(func() {
				defer close(p.done)
				c.work(c.workCtx, p)
			})
		}
	}
	c.mu.Unlock()
	c.committer.mu.Unlock()
	c.rebalanced("assigned", assigned)
}

// revoked is OnPartitionsRevoked: no record of the revoked partitions
// starts a handler from now on (their queues are dropped, a retry wait
// ends), the handlers running on them get up to Options.RevokeTimeout to
// finish, then the watermarks of the revoked partitions (what is done) are
// committed, with this member's generation, and the partitions leave what
// the committer may commit. A handler still running after RevokeTimeout
// goes on under its lease; its outcome is not committed by this member.
func (c *Consumer[T, R]) revoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	parts := c.fence(cl, revoked)
	if len(parts) > 0 {
		t := time.NewTimer(c.opts.RevokeTimeout)
		for _, p := range parts {
			select {
			case <-p.done:
			case <-t.C:
			}
		}
		t.Stop()
	}
	if err := c.committer.release(ctx, parts, true, func() { c.forget(parts) }); err != nil {
		c.opts.Logger.WarnContext(ctx, "dedupfranz: committing the revoked partitions failed; their next owner re-reads from the previous commit",
			slog.Any("error", err))
	}
	c.rebalanced("revoked", revoked)
}

// lost is OnPartitionsLost: the partitions are fenced as on a revoke, but
// nothing is committed for them (the member is out of the group: another
// may own them already), and the handlers running on them are not waited
// for.
func (c *Consumer[T, R]) lost(ctx context.Context, cl *kgo.Client, lost map[string][]int32) {
	parts := c.fence(cl, lost)
	_ = c.committer.release(ctx, parts, false, func() { c.forget(parts) })
	if len(parts) > 0 {
		c.opts.Logger.WarnContext(ctx, "dedupfranz: partitions lost (the member left the group without revoking them); nothing is committed for them",
			slog.Int("partitions", len(parts)))
	}
	c.rebalanced("lost", lost)
}

// fence fences the owned partitions of tps and returns them.
func (c *Consumer[T, R]) fence(cl *kgo.Client, tps map[string][]int32) []*partition {
	var parts []*partition
	c.mu.Lock()
	for topic, ps := range tps {
		for _, part := range ps {
			if p := c.parts[tp{topic, part}]; p != nil {
				parts = append(parts, p)
			}
		}
	}
	c.mu.Unlock()
	resume := map[string][]int32{}
	for _, p := range parts {
		p.fence()
		resume[p.id.topic] = append(resume[p.id.topic], p.id.partition)
	}
	if len(resume) > 0 {
		// A pause outlives the assignment in kgo: a partition assigned
		// again must be fetched.
		cl.ResumeFetchPartitions(resume)
	}
	return parts
}

// forget removes parts from what this member owns; the committer's lock
// is held.
func (c *Consumer[T, R]) forget(parts []*partition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range parts {
		if c.parts[p.id] == p {
			delete(c.parts, p.id)
		}
	}
}

func (c *Consumer[T, R]) rebalanced(event string, parts map[string][]int32) {
	if f := c.onRebalance; f != nil {
		f(event, parts)
	}
}

// Stop stops polling, lets the partitions finish the records they are
// handling (records fetched but not started are left for the next owner,
// and a record waiting to be retried stops waiting), commits every
// partition's watermark, and closes the client, which leaves the group
// (not with a kgo.InstanceID: a static member keeps its partitions until
// its session times out, so that a restart within it rebalances nothing).
// When ctx ends first, the handlers' contexts are cancelled and Stop
// returns ctx's error; Stopped tells when the consumer is gone. A failed
// final commit is returned, matching ErrCommit: the next owner re-reads
// from the previous commit.
func (c *Consumer[T, R]) Stop(ctx context.Context) error {
	c.mu.Lock()
	if !c.started {
		c.mu.Unlock()
		return ErrNotStarted
	}
	c.mu.Unlock()
	c.beginStop()
	select {
	case <-c.stopped:
		return c.committer.finalErr
	case <-ctx.Done():
		c.cancelWork()
		return ctx.Err()
	}
}

// beginStop stops polling and tells the partitions to stop.
func (c *Consumer[T, R]) beginStop() {
	c.stopOnce.Do(func() {
		close(c.stopping)
		c.cancelPoll()
	})
}

// stoppedUnasked records why the consumer stops when nobody asked it to
// (Err), and logs it at error level, unless Stop was called first or an
// earlier cause was recorded.
func (c *Consumer[T, R]) stoppedUnasked(ctx context.Context, cause error) {
	if c.stoppingNow() {
		return
	}
	c.mu.Lock()
	first := c.err == nil
	if first {
		c.err = fmt.Errorf("%w: %w", ErrStoppedUnasked, cause)
	}
	c.mu.Unlock()
	if first {
		c.opts.Logger.ErrorContext(ctx, "dedupfranz: the consumer stopped without Stop", slog.Any("error", cause))
	}
}

// Stopped is closed when the consumer has stopped: after Stop, or a stop
// nobody asked for (Start's context ended), which Err then reports.
func (c *Consumer[T, R]) Stopped() <-chan struct{} { return c.stopped }

// Stats returns what the Consumer did with its deliveries, in the shape
// every adapter of dedup shares:
//
//	Delivered        records taken by a partition's worker (a retry in place is not taken again)
//	Acked            acks settled: the watermark moved past the record, committed or queued for the next
//	                 commit (not one whose commit made at once, under CommitEveryOutcome, failed)
//	RetriedInPlace   retries in place: the record is handed to the receiver again after the delay
//	RetriedLater     records written to a retry topic (acknowledged by all in-sync replicas)
//	DeadLettered     dead letters written (acknowledged by all in-sync replicas)
//	PoisonDropped    poison committed past without a dead letter (Options.DropPoison)
//	SettleFailures   failed OffsetCommits, and failed dead-letter and retry-topic writes (each try)
//	Reconnects       0: kgo reconnects by itself, unreported
//	StaleDeliveries  deliveries settled after their partition was revoked or lost: not committed
//	                 by this member, the next owner reads them again (and finds them done)
func (c *Consumer[T, R]) Stats() dedup.ConsumerStats {
	s := c.stats
	return dedup.ConsumerStats{
		Delivered:       s.delivered.Load(),
		Acked:           s.acked.Load(),
		RetriedInPlace:  s.retriedInPlace.Load(),
		RetriedLater:    s.retriedLater.Load(),
		DeadLettered:    s.deadLettered.Load(),
		PoisonDropped:   s.poisonDropped.Load(),
		SettleFailures:  s.settleFailures.Load(),
		StaleDeliveries: s.stale.Load(),
	}
}

// Err returns why the consumer stopped when nobody asked it to (it was not
// Stop): an error matching ErrStoppedUnasked that wraps context.Cause of
// Start's context. It returns nil otherwise.
func (c *Consumer[T, R]) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// stoppingNow reports whether the consumer is stopping.
func (c *Consumer[T, R]) stoppingNow() bool {
	select {
	case <-c.stopping:
		return true
	default:
		return false
	}
}
