package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/segmentio/kafka-go"

	"github.com/dedup-go/dedup"
)

// Stats counts what the Consumer did beside what the receiver's Stats and
// Observer report.
type Stats struct {
	// PoisonDropped counts poison messages committed past without a dead
	// letter, under Options.DropPoison.
	PoisonDropped int64
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
// [KafkaMessage] returns the kafka.Message behind it.
type Consumer[T, R any] struct {
	reader *kafka.Reader
	rcv    *dedup.Receiver[*dedup.Message[T], R]
	opts   Options
	group  string
	dlw    *kafka.Writer
	ownDLW bool          // dlw was made by Start, and is closed by the shutdown
	rtw    *kafka.Writer // writes to the retry topics; nil without RetryTopics
	ownRTW bool          // rtw was made by Start (and is not dlw), and is closed by the shutdown
	sem    chan struct{}

	poisonDropped atomic.Int64 // under DropPoison

	mu          sync.Mutex
	started     bool
	parts       map[partitionID]*partition
	stopping    chan struct{} // closed when stopping: no new batch, no retry wait
	stopOnce    sync.Once
	cancelFetch context.CancelFunc
	cancelWork  context.CancelFunc // cancels handlers: the hard stop
	workers     sync.WaitGroup
	stopped     chan struct{}
	err         error // what ended fetching, if not a stop
	committer   *committer
}

type partitionID struct {
	topic     string
	partition int
}

// NewConsumer returns a Consumer that feeds the messages of r to rcv. r
// must have a GroupID and a CommitInterval of 0 (synchronous commits), which
// Start checks. opts may be nil for the defaults. The Consumer closes r
// when it stops.
func NewConsumer[T, R any](r *kafka.Reader, rcv *dedup.Receiver[*dedup.Message[T], R], opts *Options) (*Consumer[T, R], error) {
	switch {
	case r == nil:
		return nil, wrapConfig("reader is nil")
	case rcv == nil:
		return nil, wrapConfig("receiver is nil")
	}
	o := opts.withDefaults(rcv.Logger())
	if err := o.validate(); err != nil {
		return nil, err
	}
	return &Consumer[T, R]{
		reader:   r,
		rcv:      rcv,
		opts:     o,
		group:    r.Config().GroupID,
		sem:      make(chan struct{}, o.Concurrency),
		parts:    map[partitionID]*partition{},
		stopping: make(chan struct{}),
		stopped:  make(chan struct{}),
	}, nil
}

// Start checks the reader (a GroupID, CommitInterval 0) and the topics'
// redelivery horizon against the receiver's retention (see
// Options.StrictHorizon), and starts fetching and handling messages. It
// returns once fetching runs. Cancelling ctx later is a hard stop: fetching
// stops and the handlers' contexts are cancelled. A Consumer starts once.
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
	workCtx, cancelWork := context.WithCancel(ctx)
	fetchCtx, cancelFetch := context.WithCancel(workCtx)
	c.cancelWork, c.cancelFetch = cancelWork, cancelFetch
	c.committer = newCommitter(c.reader, c.opts, c.readerClosed)
	c.committer.start()
	fetched := make(chan struct{})
	go func() { // the fetch loop, owned by the consumer: ends with fetchCtx
		defer close(fetched)
		c.fetch(workCtx, fetchCtx)
	}()
	go func() { // the shutdown, owned by the consumer: ends after fetching does
		<-fetched
		c.beginStop()
		c.workers.Wait()
		c.committer.stop()
		if err := c.reader.Close(); err != nil {
			c.opts.Logger.WarnContext(ctx, "dedupkafka: closing the reader failed", slog.Any("error", err))
		}
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
// checks the retry topics.
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
	return c.checkHorizon(cctx, client, cfg.StartOffset, topics)
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
// partition's watermark, closes the reader, and returns. When ctx ends
// first, the handlers' contexts are cancelled and Stop returns ctx's error;
// Stopped tells when the consumer is gone. A failed final commit is
// returned, matching ErrCommit: the next owner re-reads from the previous
// commit.
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
	c.mu.Lock()
	if c.err == nil {
		c.err = errors.New("dedupkafka: the reader was closed under the consumer: " + io.ErrClosedPipe.Error())
	}
	c.mu.Unlock()
	c.beginStop()
}

// Stopped is closed when the consumer has stopped: after Stop, a hard stop,
// or a fetch error. Err says why, in the last case.
func (c *Consumer[T, R]) Stopped() <-chan struct{} { return c.stopped }

// Stats returns the Consumer's counters.
func (c *Consumer[T, R]) Stats() Stats {
	return Stats{PoisonDropped: c.poisonDropped.Load()}
}

// Err returns the error that stopped fetching when it was not Stop or the
// cancellation of Start's context (the reader closed elsewhere, say), or
// nil.
func (c *Consumer[T, R]) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// fetch hands fetched messages to their partitions until fetchCtx ends or
// fetching fails. A partition whose buffer is full blocks it: the reader
// cannot pause one partition.
func (c *Consumer[T, R]) fetch(workCtx, fetchCtx context.Context) {
	for {
		m, err := c.reader.FetchMessage(fetchCtx)
		if err != nil {
			if fetchCtx.Err() == nil {
				c.mu.Lock()
				if c.err == nil {
					c.err = fmt.Errorf("dedupkafka: fetch: %w", err)
				}
				c.mu.Unlock()
				c.committer.readerGone(c.err)
				c.opts.Logger.ErrorContext(workCtx, "dedupkafka: fetching failed; the consumer stops", slog.Any("error", err))
			}
			return
		}
		p := c.partition(workCtx, m)
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

// stoppingNow reports whether the consumer is stopping.
func (c *Consumer[T, R]) stoppingNow() bool {
	select {
	case <-c.stopping:
		return true
	default:
		return false
	}
}
