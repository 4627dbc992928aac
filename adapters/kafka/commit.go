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

	mu       sync.Mutex
	mark     kafka.Message // the watermark's message
	marked   bool          // mark is set and not committed yet
	moves    uint64        // how many times the watermark moved: mark's number
	tried    uint64        // the number of the last watermark a commit was made for
	triedErr error         // what that commit came to
}

// setMark moves the watermark to m, and returns the move's number.
func (p *partition) setMark(m kafka.Message) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.moves++
	p.mark, p.marked = m, true
	return p.moves
}

// triedFor reports whether a commit was made for the watermark move (or a
// later one), and what the last such commit came to.
func (p *partition) triedFor(move uint64) (tried bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tried >= move, p.triedErr
}

// committer commits the partitions' watermarks: every CommitInterval, or
// at once for CommitEveryOutcome (then its ticker only retries failed
// commits). Commits are serialised, so that an older watermark is never
// committed after a newer one; each commit takes every watermark that
// moved since its last commit (a group commit).
type committer struct {
	reader *kafka.Reader
	opts   Options
	stats  *counters
	closed func() // called when a commit finds the reader closed

	mu      sync.Mutex // guards parts, leading and ended
	parts   []*partition
	leading bool          // a commit is on its way
	ended   chan struct{} // closed when the commit on its way ends

	// What only the commit on its way touches.
	gone     error           // set when the reader was found closed: no commit can succeed
	msgs     []kafka.Message // the watermarks a commit takes, reused by the next
	from     []*partition    // their partitions
	moves    []uint64        // their move numbers
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
		every = defaultCommitInterval
	}
	go func() {
		defer close(cm.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				_ = cm.flush(context.Background())
			case <-cm.quit:
				cm.finalErr = cm.flush(context.Background())
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

// flush commits the watermarks of every partition that moved since its
// last commit, in one OffsetCommit, after the commit on its way (if any).
// ctx is for the log: the commit has its own deadline, SettleTimeout.
func (cm *committer) flush(ctx context.Context) error {
	cm.mu.Lock()
	for cm.leading {
		ended := cm.ended
		cm.mu.Unlock()
		<-ended
		cm.mu.Lock()
	}
	cm.lead()
	cm.mu.Unlock()
	defer cm.endLead()
	return cm.commit(ctx)
}

// commitMark returns once p's watermark move was committed, with what
// the commit came to (CommitEveryOutcome). While a commit is on its way,
// the watermarks that move wait for it to end, and then go out together in
// the next commit, which one of their partitions makes; a watermark the
// commit on its way took needs no other. So partitions that finish while
// another's commit is on its way share one OffsetCommit, and none waits for
// more than the commit on its way and its own.
func (cm *committer) commitMark(ctx context.Context, p *partition, move uint64) error {
	cm.mu.Lock()
	for {
		if tried, err := p.triedFor(move); tried {
			cm.mu.Unlock()
			return err
		}
		if !cm.leading {
			break
		}
		ended := cm.ended
		cm.mu.Unlock()
		<-ended
		cm.mu.Lock()
	}
	cm.lead()
	cm.mu.Unlock()
	defer cm.endLead()
	return cm.commit(ctx)
}

// lead makes the caller the maker of the next commit; cm.mu is held and
// no commit is on its way.
func (cm *committer) lead() {
	cm.leading, cm.ended = true, make(chan struct{})
}

// endLead ends the commit on its way, waking those waiting for it.
func (cm *committer) endLead() {
	cm.mu.Lock()
	cm.leading = false
	close(cm.ended)
	cm.mu.Unlock()
}

// commit commits the watermarks of every partition that moved since its
// last commit, in one OffsetCommit; the caller leads.
func (cm *committer) commit(ctx context.Context) error {
	if cm.gone != nil {
		return cm.gone
	}
	cm.mu.Lock()
	parts := cm.parts // only ever appended to: the elements seen stay as they are
	cm.mu.Unlock()
	msgs, from, moves := cm.msgs[:0], cm.from[:0], cm.moves[:0]
	defer func() {
		clear(msgs)
		clear(from)
		cm.msgs, cm.from, cm.moves = msgs[:0], from[:0], moves[:0]
	}()
	for _, p := range parts {
		p.mu.Lock()
		if p.marked {
			msgs = append(msgs, p.mark)
			from = append(from, p)
			moves = append(moves, p.moves)
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
	}
	for i, p := range from {
		p.mu.Lock()
		p.tried, p.triedErr = moves[i], err
		if err == nil && p.moves == moves[i] {
			p.marked = false
		}
		p.mu.Unlock()
	}
	return err
}
