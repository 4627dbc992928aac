package dedupkafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// partition is one partition's queue of fetched messages and its
// watermark: the last message before which every message fetched for the
// partition has an outcome. The watermark is counted in fetch order, never
// as offset+1 of whatever finished: offsets have gaps (compaction,
// transaction markers), and a commit past a message still being retried
// would skip it.
type partition struct {
	id    partitionID
	queue chan kafka.Message

	mu     sync.Mutex
	mark   kafka.Message // the watermark's message
	marked bool          // mark is set and not committed yet
}

// setMark moves the watermark to m.
func (p *partition) setMark(m kafka.Message) {
	p.mu.Lock()
	p.mark, p.marked = m, true
	p.mu.Unlock()
}

// committer commits the partitions' watermarks: every CommitInterval, or
// at once for CommitEveryOutcome (then its ticker only retries failed
// commits). Commits are serialised, so that an older watermark is never
// committed after a newer one.
type committer struct {
	reader *kafka.Reader
	opts   Options
	stats  *counters
	closed func() // called when a commit finds the reader closed

	mu    sync.Mutex // guards parts
	parts []*partition

	commitMu sync.Mutex // one commit at a time, in watermark order
	gone     error      // set when the reader was found closed: no commit can succeed
	dead     context.Context
	kill     context.CancelCauseFunc // ends commits waiting on a reader that is gone
	quit     chan struct{}
	done     chan struct{}
	finalErr error // the last flush's error, read after done
}

func newCommitter(r *kafka.Reader, opts Options, stats *counters, closed func()) *committer {
	dead, kill := context.WithCancelCause(context.Background())
	return &committer{reader: r, opts: opts, stats: stats, closed: closed, dead: dead, kill: kill, quit: make(chan struct{}), done: make(chan struct{})}
}

func (cm *committer) add(p *partition) {
	cm.mu.Lock()
	cm.parts = append(cm.parts, p)
	cm.mu.Unlock()
}

// start runs the ticker until stop; the committer owns the goroutine.
func (cm *committer) start() {
	every := cm.opts.CommitInterval
	if every == CommitEveryOutcome {
		every = DefaultCommitInterval
	}
	go func() {
		defer close(cm.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				_ = cm.flush(context.Background(), nil)
			case <-cm.quit:
				cm.finalErr = cm.flush(context.Background(), nil)
				return
			}
		}
	}()
}

// stop commits what is left and ends the ticker.
func (cm *committer) stop() {
	close(cm.quit)
	<-cm.done
	cm.kill(nil)
}

// readerGone ends the commits waiting on a reader that failed: kafka-go
// may have queued them for a commit loop that no longer runs, where they
// would wait for their SettleTimeout.
func (cm *committer) readerGone(err error) { cm.kill(err) }

// flush commits the watermarks of only, or of every partition when only
// is nil, that moved since their last commit, in one OffsetCommit. ctx
// is for the log: the commit has its own deadline, SettleTimeout.
func (cm *committer) flush(ctx context.Context, only *partition) error {
	cm.commitMu.Lock()
	defer cm.commitMu.Unlock()
	if cm.gone != nil {
		return cm.gone
	}
	var parts []*partition
	if only != nil {
		parts = []*partition{only}
	} else {
		cm.mu.Lock()
		parts = append(parts, cm.parts...)
		cm.mu.Unlock()
	}
	var msgs []kafka.Message
	var from []*partition
	for _, p := range parts {
		p.mu.Lock()
		if p.marked {
			msgs = append(msgs, p.mark)
			from = append(from, p)
		}
		p.mu.Unlock()
	}
	if len(msgs) == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(cm.dead, cm.opts.SettleTimeout)
	err := cm.reader.CommitMessages(cctx, msgs...)
	cancel()
	if err != nil {
		cm.stats.settleFailures.Add(1)
		err = fmt.Errorf("%w: %d partitions: %w", ErrCommit, len(msgs), err)
		if errors.Is(err, io.ErrClosedPipe) || cm.dead.Err() != nil {
			// The reader was closed under the consumer: nothing it handles
			// from now on can be committed (a commit sent now would wait for
			// its SettleTimeout), so it stops at once.
			cm.gone = err
			cm.closed()
		}
		cm.opts.Logger.ErrorContext(ctx, "dedupkafka: committing offsets failed; retrying on the next tick (a crash meanwhile re-reads more messages, answered as duplicates)",
			slog.Int("partitions", len(msgs)), slog.Any("error", err))
		return err
	}
	for i, p := range from {
		p.mu.Lock()
		if p.mark.Offset == msgs[i].Offset && p.mark.Topic == msgs[i].Topic {
			p.marked = false
		}
		p.mu.Unlock()
	}
	return nil
}
