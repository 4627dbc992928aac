package dedupfranz

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// committer commits the watermarks of the partitions this member owns:
// every CommitInterval, or at once for CommitEveryOutcome (then its ticker
// only retries failed commits), and those of revoked partitions in
// OnPartitionsRevoked. Commits are serialised (mu), so that an older
// watermark is never committed after a newer one, and so that the set of
// partitions a commit takes is read under the same lock a revoke or a loss
// takes to remove partitions from it: once OnPartitionsRevoked or
// OnPartitionsLost removed a partition, no commit of this member names it.
// Each commit takes every watermark that moved since its last commit (a
// group commit), and goes out with kgo's CommitOffsetsSync, which sends
// the member's current generation: a member that is no longer in the
// group has its commit refused by the broker.
type committer struct {
	client atomic.Pointer[kgo.Client] // set once the client is built (a callback may run before)
	opts   Options
	stats  *counters
	owned  func([]*partition) []*partition // appends the partitions this member owns; read under mu

	mu sync.Mutex // serialises commits, and the changes of what is owned

	// CommitEveryOutcome: the partitions waiting for their watermark's
	// commit wait for the commit on its way (ended) rather than for mu, so
	// that all those it took go on at once, and those it did not go out
	// together in the next.
	lmu     sync.Mutex    // guards leading and ended
	leading bool          // a commitMark's commit is on its way
	ended   chan struct{} // closed when that commit ends

	// What a commit reuses; mu is held.
	parts []*partition
	from  []*partition
	moves []uint64

	quit     chan struct{}
	done     chan struct{}
	finalErr error // the last flush's error, read after done
}

func newCommitter(opts Options, stats *counters, owned func([]*partition) []*partition) *committer {
	return &committer{opts: opts, stats: stats, owned: owned, quit: make(chan struct{}), done: make(chan struct{})}
}

// setClient sets the client commits go through. It takes no lock: Start
// holds the Consumer's, which a group callback holding mu may wait for.
func (cm *committer) setClient(cl *kgo.Client) { cm.client.Store(cl) }

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
}

// flush commits the watermarks of every owned partition that moved since
// its last commit, in one OffsetCommit.
func (cm *committer) flush(ctx context.Context) error {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	cm.parts = cm.owned(cm.parts[:0])
	defer clear(cm.parts)
	return cm.commit(ctx, cm.parts)
}

// commitMark returns once p's watermark move was committed, with what the
// commit came to (CommitEveryOutcome). The partitions whose watermarks
// moved while a commit was on its way go out together in the next.
//
// While a commit made here is on its way, the partitions whose watermarks
// move wait for it to end, then each finds whether it took their move; one
// of those it did not take makes the next commit, which takes every
// watermark that moved meanwhile. So no partition waits behind a commit
// that carries nothing of its own, and none waits for more than the commit
// on its way and the next.
func (cm *committer) commitMark(ctx context.Context, p *partition, move uint64) error {
	for {
		if tried, err := p.triedFor(move); tried {
			return err
		}
		cm.lmu.Lock()
		if !cm.leading {
			break
		}
		ended := cm.ended
		cm.lmu.Unlock()
		select {
		case <-ended:
		case <-ctx.Done():
			// The move stays marked: the ticker's or the revoke's commit
			// takes it, or the records are delivered again.
			return fmt.Errorf("dedupfranz: waiting for the commit on its way: %w", context.Cause(ctx))
		}
	}
	cm.leading, cm.ended = true, make(chan struct{})
	cm.lmu.Unlock()
	defer func() {
		cm.lmu.Lock()
		cm.leading = false
		close(cm.ended)
		cm.lmu.Unlock()
	}()
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if tried, err := p.triedFor(move); tried { // a flush or a revoke took it meanwhile
		return err
	}
	cm.parts = cm.owned(cm.parts[:0])
	defer clear(cm.parts)
	return cm.commit(ctx, cm.parts)
}

// release removes parts from what is owned (remove, under mu) and, when
// commit is set (a revoke, not a loss), commits their watermarks first.
func (cm *committer) release(ctx context.Context, parts []*partition, commit bool, remove func()) error {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	var err error
	if commit {
		err = cm.commit(ctx, parts)
	}
	remove()
	return err
}

// commit commits the watermarks of parts that moved since their last
// commit, in one OffsetCommit; mu is held.
func (cm *committer) commit(ctx context.Context, parts []*partition) error {
	offsets := map[string]map[int32]kgo.EpochOffset{}
	from, moves := cm.from[:0], cm.moves[:0]
	defer func() {
		clear(from)
		cm.from, cm.moves = from[:0], moves[:0]
	}()
	for _, p := range parts {
		p.mu.Lock()
		if p.marked {
			m := offsets[p.id.topic]
			if m == nil {
				m = map[int32]kgo.EpochOffset{}
				offsets[p.id.topic] = m
			}
			m[p.id.partition] = kgo.EpochOffset{Epoch: p.mark.LeaderEpoch, Offset: p.mark.Offset + 1}
			from = append(from, p)
			moves = append(moves, p.moves)
		}
		p.mu.Unlock()
	}
	cl := cm.client.Load()
	if len(from) == 0 || cl == nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, cm.opts.SettleTimeout)
	defer cancel()
	var err error
	var failed map[tp]error // the partitions the broker refused, made for the first
	cl.CommitOffsetsSync(cctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, rerr error) {
		if rerr != nil {
			err = rerr
			return
		}
		for _, t := range resp.Topics {
			for _, pr := range t.Partitions {
				if perr := kerr.ErrorForCode(pr.ErrorCode); perr != nil {
					if failed == nil {
						failed = map[tp]error{}
					}
					failed[tp{t.Topic, pr.Partition}] = perr
				}
			}
		}
	})
	if err == nil && len(failed) > 0 {
		for id, perr := range failed {
			err = fmt.Errorf("%s[%d]: %w", id.topic, id.partition, perr)
			break
		}
	}
	if err != nil {
		cm.stats.settleFailures.Add(1)
		err = fmt.Errorf("%w: %d partitions: %w", ErrCommit, len(from), err)
		cm.opts.Logger.ErrorContext(ctx, "dedupfranz: committing offsets failed; retrying on the next tick (a crash meanwhile re-reads more records, answered as duplicates)",
			slog.Int("partitions", len(from)), slog.Any("error", err))
	}
	for i, p := range from {
		p.mu.Lock()
		perr := err
		if e, ok := failed[p.id]; ok {
			perr = fmt.Errorf("%w: %w", ErrCommit, e)
		} else if len(failed) > 0 && err != nil {
			perr = nil // the commit's own error named another partition: this one is committed
		}
		p.tried, p.triedErr = moves[i], perr
		if perr == nil && p.moves == moves[i] {
			p.marked = false
		}
		p.mu.Unlock()
	}
	return err
}
