package dedupfranz

import (
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// tp names a topic partition.
type tp struct {
	topic     string
	partition int32
}

// partition is one assignment of a partition to this member: the records
// fetched for it and not yet taken by its worker, and its watermark, the
// last record before which every record taken has an outcome. A partition
// assigned again after a revoke is a new partition: nothing of the old
// assignment (its records, its watermark) reaches the new one.
//
// The watermark is counted in fetch order, never as offset+1 of whatever
// finished: offsets have gaps (compaction, transaction markers), and a
// commit past a record still being retried would skip it.
type partition struct {
	id     tp
	ready  chan struct{} // holds a token once records arrived for the worker
	fenced chan struct{} // closed when the partition was revoked or lost
	done   chan struct{} // closed when its worker ended

	mu       sync.Mutex
	queue    []*kgo.Record // fetched, not taken yet
	paused   bool          // fetching is paused (kgo's PauseFetchPartitions)
	isFenced atomic.Bool   // fenced is closed: no delivery of this partition starts; set under mu, read without it by open
	mark     *kgo.Record   // the watermark's record
	marked   bool          // mark is set and not committed yet
	moves    uint64        // how many times the watermark moved: mark's number
	tried    uint64        // the number of the last watermark a commit was made for
	triedErr error         // what that commit came to
}

func newPartition(id tp) *partition {
	return &partition{id: id, ready: make(chan struct{}, 1), fenced: make(chan struct{}), done: make(chan struct{})}
}

// fence stops p: no delivery of it starts from now on, and a retry wait
// ends. It reports whether p was fenced before.
func (p *partition) fence() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.isFenced.Load() {
		return true
	}
	p.isFenced.Store(true)
	p.queue = nil
	close(p.fenced)
	return false
}

// open reports whether p may start a delivery: it was not fenced. It is
// asked right before each handing to the receiver. It takes no lock: once
// fence returned, open reports false.
func (p *partition) open() bool {
	return !p.isFenced.Load()
}

// setMark moves the watermark to r, and returns the move's number.
func (p *partition) setMark(r *kgo.Record) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.moves++
	p.mark, p.marked = r, true
	return p.moves
}

// triedFor reports whether a commit was made for the watermark move (or a
// later one), and what the last such commit came to.
func (p *partition) triedFor(move uint64) (tried bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tried >= move, p.triedErr
}

// buffered is how many records wait for p's worker.
func (p *partition) buffered() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue)
}
