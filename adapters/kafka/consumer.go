package dedupkafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
)

// counters are the Consumer's [dedup.ConsumerStats], shared with its
// committer.
type counters struct {
	delivered, acked, retriedInPlace, retriedLater, deadLettered, poisonDropped, settleFailures atomic.Uint64
}

// Consumer runs a dedup.Receiver over a kafka-go consumer-group Reader: it
// fetches messages (FetchMessage, never ReadMessage, which commits before
// processing), decodes each into a dedup.Message, hands each partition's
// messages to the receiver in offset order, partitions concurrently, and
// settles each as the receiver's Decide says: Ack lets the partition's
// watermark move past it, Retry retries it in place after the decision's
// delay (or, with Options.RetryTopics, writes it to a retry topic first),
// DeadLetter writes it to the dead-letter topic first. A Consumer on a
// reader of retry topics hands each message over no sooner than its
// HeaderNotBefore. Each
// partition's watermark (the last message before which every fetched
// message has an outcome) is committed every Options.CommitInterval.
//
// The envelope's Source and Stream are the topic, Partition and Offset the
// message's, Header its record headers ([Header]), Timestamp its time.
// [Native] returns the kafka.Message behind it.
type Consumer[T, R any] struct {
	reader *kafka.Reader
	rcv    *adapter.Receiver[*dedup.Message[T], R]
	opts   Options
	group  string
	dlw    *kafka.Writer
	ownDLW bool          // dlw was made by Start, and is closed by the shutdown
	rtw    *kafka.Writer // writes to the retry topics; nil without RetryTopics
	ownRTW bool          // rtw was made by Start (and is not dlw), and is closed by the shutdown
	sem    chan struct{}

	stats *counters

	mu          sync.Mutex
	started     bool
	parts       map[partitionID]*partition
	stopping    chan struct{} // closed when stopping: no new batch, no retry wait
	stopOnce    sync.Once
	cancelFetch context.CancelFunc
	cancelWork  context.CancelFunc // cancels handlers: the hard stop
	workers     sync.WaitGroup
	stopped     chan struct{}
	err         error // why the consumer stopped when nobody asked it to (matches ErrStoppedUnasked)
	committer   *committer
}

var _ dedup.Consumer = (*Consumer[struct{}, struct{}])(nil)

type partitionID struct {
	topic     string
	partition int
}

// NewConsumer returns a Consumer that feeds the messages of r to rcv. r
// must have a GroupID and a CommitInterval of 0 (synchronous commits), which
// Start checks.
//
// A nil opts is the zero Options: every field takes its default, but
// where poison goes has none, so a nil opts is refused, as are Options
// that set neither Options.DeadLetterTopic nor Options.DropPoison, with an
// error matching dedup.ErrInvalidConfig that names both (see Options).
//
// r stays the caller's: the Consumer never closes it. Close it after Stop
// returns (or after Stopped is closed): closing it leaves the consumer
// group, handing its partitions to the other members.
func NewConsumer[T, R any](r *kafka.Reader, rcv *dedup.Receiver[*dedup.Message[T], R], opts *Options) (*Consumer[T, R], error) {
	switch {
	case r == nil:
		return nil, wrapConfig("reader is nil")
	case rcv == nil:
		return nil, wrapConfig("receiver is nil")
	}
	b := adapter.Bind(rcv)
	o := opts.withDefaults(b.Logger())
	if err := o.validate(); err != nil {
		return nil, err
	}
	return &Consumer[T, R]{
		reader:   r,
		rcv:      b,
		opts:     o,
		group:    r.Config().GroupID,
		sem:      make(chan struct{}, o.Concurrency),
		stats:    &counters{},
		parts:    map[partitionID]*partition{},
		stopping: make(chan struct{}),
		stopped:  make(chan struct{}),
	}, nil
}

// Start checks the reader (a GroupID, CommitInterval 0), the dead-letter
// topic (it must exist: ErrDeadLetterTopic), the retry topics
// (ErrRetryTopics) and the topics' redelivery horizon against the
// receiver's retention (see Options.StrictHorizon), and starts fetching and
// handling messages. It returns once fetching runs. A Consumer starts once.
//
// ctx is the consumer's life, not Start's: when it ends without Stop (a
// context.WithTimeout given to Start, say), that is a hard stop nobody
// asked for: fetching stops, the handlers' contexts are cancelled, the
// watermarks are committed, the stop is logged at error level, and Err
// returns an error matching ErrStoppedUnasked that wraps context.Cause(ctx).
// To stop, call Stop, with a context of its own.
func (c *Consumer[T, R]) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return ErrStarted
	}
	cfg := c.reader.Config()
	switch {
	case cfg.GroupID == "":
		return &configError{ErrReaderConfig, "dedupkafka: the reader has no GroupID: offsets can only be committed in a consumer group"}
	case cfg.CommitInterval != 0:
		return &configError{ErrReaderConfig, fmt.Sprintf("dedupkafka: the reader has CommitInterval %v: its asynchronous commits report errors only to its logger; set it to 0 and Options.CommitInterval instead", cfg.CommitInterval)}
	}
	if err := c.checkTopics(ctx, cfg); err != nil {
		return err
	}
	c.dlw = c.opts.DeadLetterWriter
	if c.opts.DeadLetterTopic != "" && c.dlw == nil {
		c.dlw, c.ownDLW = defaultWriter(cfg), true
	}
	if len(c.opts.RetryTopics) > 0 {
		switch {
		case c.opts.RetryWriter != nil:
			c.rtw = c.opts.RetryWriter
		case c.dlw != nil:
			c.rtw = c.dlw
		default:
			c.rtw, c.ownRTW = defaultWriter(cfg), true
		}
	}
	c.started = true
	workCtx, cancelWork := context.WithCancel(adapter.WithOrigin(ctx, c.origin(cfg)))
	fetchCtx, cancelFetch := context.WithCancel(workCtx)
	c.cancelWork, c.cancelFetch = cancelWork, cancelFetch
	c.committer = newCommitter(c.reader, c.opts, c.stats, c.readerClosed)
	c.committer.start()
	fetched := make(chan struct{})
	go func() { // the fetch loop, owned by the consumer: ends with fetchCtx
		defer close(fetched)
		c.fetch(workCtx, fetchCtx)
		if fetchCtx.Err() != nil && !c.stoppingNow() {
			// Only ctx ends fetchCtx before beginStop: a hard stop.
			c.stoppedUnasked(ctx, fmt.Errorf("the context given to Start ended: %w", context.Cause(ctx)))
		}
	}()
	go func() { // the shutdown, owned by the consumer: ends after fetching does
		<-fetched
		c.beginStop()
		c.workers.Wait()
		c.committer.stop()
		// The reader is the caller's: it is left open (the caller closes it,
		// leaving the group), and nothing fetches from it any more.
		if c.ownDLW {
			_ = c.dlw.Close()
			c.dlw.Transport.(*kafka.Transport).CloseIdleConnections()
		}
		if c.ownRTW {
			_ = c.rtw.Close()
			c.rtw.Transport.(*kafka.Transport).CloseIdleConnections()
		}
		cancelWork()
		close(c.stopped)
	}()
	return nil
}

// checkTopics compares the topics' retention with the receiver's, and
// checks the retry topics and the dead-letter topic.
func (c *Consumer[T, R]) checkTopics(ctx context.Context, cfg kafka.ReaderConfig) error {
	topics := cfg.GroupTopics
	if cfg.Topic != "" {
		topics = append([]string{cfg.Topic}, topics...)
	}
	client := c.opts.Client
	if client == nil {
		tr := transport(cfg)
		defer tr.CloseIdleConnections()
		client = &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Transport: tr}
	}
	cctx, cancel := context.WithTimeout(ctx, c.opts.SettleTimeout)
	defer cancel()
	if len(c.opts.RetryTopics) > 0 {
		if problem := checkRetryTopics(cctx, client, topics, c.opts.RetryTopics, c.rcv.Retention()); problem != "" {
			return &configError{ErrRetryTopics, "dedupkafka: " + problem}
		}
	}
	if c.opts.DeadLetterTopic != "" {
		if problem := c.checkDeadLetterTopic(cctx, cfg, client); problem != "" {
			return &configError{ErrDeadLetterTopic, "dedupkafka: " + problem}
		}
	}
	return c.checkHorizon(cctx, client, cfg.StartOffset, topics)
}

// checkDeadLetterTopic checks that the dead-letter topic exists where dead
// letters are written: the DeadLetterWriter's cluster when one is given
// (through its Transport), else the reader's (through client). It returns a
// description of the problem, or "".
func (c *Consumer[T, R]) checkDeadLetterTopic(ctx context.Context, cfg kafka.ReaderConfig, client *kafka.Client) string {
	if w := c.opts.DeadLetterWriter; w != nil {
		client = &kafka.Client{Addr: w.Addr, Transport: w.Transport}
		if w.Transport == nil {
			tr := transport(cfg)
			defer tr.CloseIdleConnections()
			client.Transport = tr
		}
	}
	_, problem := describeTopics(ctx, client, "dead-letter topic", []string{c.opts.DeadLetterTopic})
	return problem
}

// checkHorizon compares the topics' retention with the receiver's.
func (c *Consumer[T, R]) checkHorizon(ctx context.Context, client *kafka.Client, startOffset int64, topics []string) error {
	retentions, err := topicRetentions(ctx, client, topics)
	problem := ""
	if err != nil {
		problem = "the horizon check could not read the topics' retention: " + err.Error()
	} else {
		problem = checkHorizon(startOffset, retentions, c.rcv.Retention())
	}
	if problem == "" {
		return nil
	}
	if c.opts.StrictHorizon {
		return &configError{ErrHorizon, "dedupkafka: " + problem}
	}
	c.opts.Logger.WarnContext(ctx, "dedupkafka: "+problem)
	return nil
}

// defaultWriter writes dead letters to the reader's brokers, acknowledged by
// all in-sync replicas.
func defaultWriter(cfg kafka.ReaderConfig) *kafka.Writer {
	return &kafka.Writer{
		Addr:         kafka.TCP(cfg.Brokers...),
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: 1, // write each dead letter at once: the partition waits for it
		Transport:    transport(cfg),
	}
}

// transport is a transport of the Consumer's own (kafka-go's
// DefaultTransport keeps its connections for the life of the process),
// with the reader's Dialer's TLS and SASL.
func transport(cfg kafka.ReaderConfig) *kafka.Transport {
	tr := &kafka.Transport{}
	if d := cfg.Dialer; d != nil {
		tr.TLS, tr.SASL, tr.ClientID = d.TLS, d.SASLMechanism, d.ClientID
	}
	return tr
}

// Stop stops fetching, lets the partitions finish the messages they are
// handling (messages fetched but not started are left for the next owner,
// and a message waiting to be retried stops waiting), commits every
// partition's watermark, and returns. It does not close the reader: the
// caller closes it after Stop, which leaves the group (until then the
// member keeps its partitions; the Consumer takes nothing more from the
// reader). When ctx ends first, the handlers' contexts are cancelled and
// Stop returns ctx's error; Stopped tells when the consumer is gone. A
// failed final commit is returned, matching ErrCommit: the next owner
// re-reads from the previous commit.
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

// beginStop stops fetching and tells the partitions to stop.
func (c *Consumer[T, R]) beginStop() {
	c.stopOnce.Do(func() {
		close(c.stopping)
		c.cancelFetch()
	})
}

// readerClosed stops the consumer whose reader was closed under it, and
// says so in Err.
func (c *Consumer[T, R]) readerClosed() {
	c.stoppedUnasked(context.Background(), fmt.Errorf("the reader was closed under the consumer: %w", io.ErrClosedPipe))
	c.beginStop()
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
		c.opts.Logger.ErrorContext(ctx, "dedupkafka: the consumer stopped without Stop", slog.Any("error", cause))
	}
}

// Stopped is closed when the consumer has stopped: after Stop, or a stop
// nobody asked for (Start's context ended, the reader was closed under
// it), which Err then reports. A failed fetch is no stop: kafka-go's
// reader fetches and rejoins by itself, and the failure is logged.
func (c *Consumer[T, R]) Stopped() <-chan struct{} { return c.stopped }

// Stats returns what the Consumer did with its deliveries, in the shape
// every adapter of dedup shares:
//
//	Delivered        messages fetched from the reader (a retry in place is not fetched again)
//	Acked            acks settled: the watermark moved past the message, committed or queued for the next
//	                 commit (not one whose commit made at once, under CommitEveryOutcome, failed)
//	RetriedInPlace   retries in place: the message is handed to the receiver again after the delay
//	RetriedLater     messages written to a retry topic (acknowledged by all in-sync replicas)
//	DeadLettered     dead letters written (acknowledged by all in-sync replicas)
//	PoisonDropped    poison committed past without a dead letter (Options.DropPoison)
//	SettleFailures   failed OffsetCommits, and failed dead-letter and retry-topic writes (each try)
//	Reconnects       0: kafka-go reconnects inside the reader, unreported
//	StaleDeliveries  0: kafka-go does not say when a partition is taken away
func (c *Consumer[T, R]) Stats() dedup.ConsumerStats {
	s := c.stats
	return dedup.ConsumerStats{
		Delivered:      s.delivered.Load(),
		Acked:          s.acked.Load(),
		RetriedInPlace: s.retriedInPlace.Load(),
		RetriedLater:   s.retriedLater.Load(),
		DeadLettered:   s.deadLettered.Load(),
		PoisonDropped:  s.poisonDropped.Load(),
		SettleFailures: s.settleFailures.Load(),
	}
}

// Err returns why the consumer stopped when nobody asked it to (it was not
// Stop): an error matching ErrStoppedUnasked that wraps the cause:
// context.Cause of Start's context when it ended (a hard stop), io.EOF
// when a fetch found the reader closed under the consumer, or
// io.ErrClosedPipe when a commit did.
// It returns nil otherwise.
func (c *Consumer[T, R]) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// fetch hands fetched messages to their partitions until fetchCtx ends or
// the reader is closed. A partition whose buffer is full blocks it: the
// reader cannot pause one partition.
//
// kafka-go's FetchMessage returns, once each, errors its reader goes on
// from by itself: a partition's fetch that failed with a Kafka error (its
// reader backs off and fetches again), a group join that failed
// MaxAttempts times (it goes on joining). Only io.EOF, a reader closed, is
// the end. Stopping at any other would leave the member in the group,
// heartbeating and holding its partitions, with nobody handling them until
// the process ends: so the error is logged, and fetching goes on.
func (c *Consumer[T, R]) fetch(workCtx, fetchCtx context.Context) {
	for {
		m, err := c.reader.FetchMessage(fetchCtx)
		if err != nil {
			switch {
			case fetchCtx.Err() != nil:
				return
			case errors.Is(err, io.EOF):
				c.stoppedUnasked(workCtx, fmt.Errorf("fetch: %w", err))
				c.committer.readerGone(c.Err())
				return
			}
			c.opts.Logger.WarnContext(workCtx, "dedupkafka: fetching failed; the reader fetches and joins the group again by itself, and the consumer goes on",
				slog.Any("error", err))
			if !c.pause(fetchCtx, c.opts.MinRetryDelay) {
				return
			}
			continue
		}
		c.stats.delivered.Add(1)
		p := c.partition(workCtx, m)
		select { // a select of one case and a default is a plain send: no select of two
		case p.queue <- m:
			continue
		default:
		}
		select {
		case p.queue <- m:
		case <-fetchCtx.Done():
			return
		}
	}
}

// partition returns m's partition, starting its worker on first sight.
func (c *Consumer[T, R]) partition(ctx context.Context, m kafka.Message) *partition {
	id := partitionID{m.Topic, m.Partition}
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.parts[id]
	if !ok {
		p = &partition{id: id, queue: make(chan kafka.Message, c.opts.PartitionBuffer)}
		c.parts[id] = p
		c.committer.add(p)
		c.workers.Go(func() { c.work(ctx, p) })
	}
	return p
}

// pause waits d, and reports false when ctx ends first.
func (c *Consumer[T, R]) pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
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
