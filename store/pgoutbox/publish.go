package pgoutbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dedup-go/dedup/outbox"
)

// maxCalls bounds the Publish calls a relay has in flight at once.
const maxCalls = 16

// maxEachCalls bounds the PublishEach calls of an outbox.AckPublisher a
// relay has in flight at once. Its messages come back one by one, and a
// call lasts until its last one: a call holds what became ready since the
// previous one (often a handful of messages), so it takes many calls to
// keep the window full.
const maxEachCalls = 256

// window is how many messages a relay keeps in flight at most, awaiting
// their acknowledgement: past about a thousand, JetStream and RabbitMQ
// go no faster, and JetStream's client stalls past 4,000 by default
// (jetstream.WithPublishAsyncMaxPending).
const window = 1024

// keyQueue is the state of one ordering key in a pump.
type keyQueue struct {
	queue   []*pending // read, waiting behind the key's message out
	out     bool       // a message of the key is ready or in a call
	blocked bool       // a message of the key failed: the rest waits for a later pump
}

// call is one Publish or PublishEach call in flight.
type call struct {
	msgs     []*pending
	reported int  // messages of the call an AckPublisher reported
	progress bool // one of them was acknowledged or refused for good
}

// callResult is the outcome of one call.
type callResult struct {
	call     *call
	err      error
	deadline bool // the call's context ended before it returned
}

// report is an AckPublisher's report of one message.
type report struct {
	m   *pending
	err error
}

// reports collects what an AckPublisher's calls report, from their
// goroutines, for the pump to take.
type reports struct {
	mu    sync.Mutex
	list  []report
	ready chan struct{} // a report is waiting; capacity 1
}

// add records one report: it never blocks.
func (b *reports) add(m *pending, err error) {
	b.mu.Lock()
	b.list = append(b.list, report{m: m, err: err})
	b.mu.Unlock()
	select {
	case b.ready <- struct{}{}:
	default:
	}
}

// take returns the reports recorded so far, handing back the slice of
// the previous take to be filled again.
func (b *reports) take(spare []report) []report {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.list
	b.list = spare[:0]
	return out
}

// fetchResult is the outcome of one mark and fetch.
type fetchResult struct {
	batch []*pending
	marks *marks // what the fetch's transaction marked
	asked int
	err   error
}

// pump publishes the unsent messages of the buckets the relay holds,
// keeping each ordering key's order, and keeps the publisher busy: it
// reads a batch, hands each key's first message to the publisher, a
// key's next one as soon as its predecessor was acknowledged (the call
// that carried it returned, or, with an outbox.AckPublisher, reported
// that message), and reads the next batch while the tail of this
// one is still being published, marking what was acknowledged so far in
// the same transaction. It returns once there is nothing more to read
// (a fetch found less than a batch), after a failure (its messages and
// those behind them wait for a later pump, after a backoff), at until (the
// relay's next renewal of its leases) or at Stop; with what is left to
// mark, how many messages it read, and whether it handed any to the
// publisher (a pump stopped before it did tried nothing: it neither
// failed nor succeeded).
//
// A message goes out only once every earlier message of its ordering key
// was acknowledged (or refused for good): no call holds two messages of
// one key. A message the broker refused for good (outbox.ErrPermanent) is
// set aside as dead and its key goes on, unless RelayOptions.HoldRefused.
// Any other failure holds back the later messages of its key. A call that
// acknowledged nothing and failed as a whole, or at its deadline, stops
// the pump from starting more: the broker is down or silent.
//
// A fetch reads the first unsent messages by seq of the buckets held,
// leaving out those the pump read and has not settled yet (in a call,
// waiting behind their key's, or failed): what it reads of a key comes
// after what the pump holds of it. The marks go in the fetch's
// transaction, so the fetch never reads what was just marked, and a mark
// that fails leaves its messages unsent, to be published again (the
// copies a crash leaves).
func (r *Relay) pump(ctx context.Context, carry *marks, until time.Time) (read int, tried bool, left *marks, rerr *roundError) {
	p := &pumpState{
		r: r, keys: map[string]*keyQueue{}, held: map[int64]bool{}, marks: carry,
		window: window, chunk: window / maxCalls, maxCalls: maxCalls,
		fetched: make(chan fetchResult, 1),
		reports: &reports{ready: make(chan struct{}, 1)},
	}
	if r.ackPub != nil {
		p.maxCalls = maxEachCalls
	}
	p.results = make(chan callResult, p.maxCalls)
	if p.marks == nil {
		p.marks = &marks{}
	}
	deadline := time.NewTimer(time.Until(until))
	defer deadline.Stop()
	quit, done, timeUp := r.quit, ctx.Done(), deadline.C
	for {
		p.dispatch(ctx)
		if !p.fetching && !p.exhausted && !p.stopped && p.failed == 0 && p.outstanding() <= p.window/2 {
			p.fetch(ctx)
		}
		if p.calls == 0 && !p.fetching && (len(p.ready) == 0 || p.stopped) {
			break
		}
		select {
		case <-p.reports.ready:
			p.takeReports()
		case res := <-p.results:
			p.settle(res)
		case f := <-p.fetched:
			p.take(ctx, f)
		case <-quit:
			p.stopped, quit = true, nil
		case <-timeUp:
			p.stopped, timeUp = true, nil
		case <-done:
			p.stopped, done = true, nil
		}
	}
	// What was read and not handed over waits for a later pump: after a
	// failure, it counts as failed (held back behind a failed message, or
	// not tried with the broker down).
	if p.failed > 0 || p.down {
		p.failed += p.queued
	}
	if p.failed > 0 {
		r.stats.failed.Add(uint64(p.failed))
		err := p.lastErr
		if err == nil {
			err = ctx.Err()
		}
		if rerr == nil {
			rerr = &roundError{op: "publish", err: err, messages: p.failed}
		}
	}
	if p.fetchErr != nil {
		rerr = p.fetchErr
	}
	return p.read, p.handed > 0, p.marks, rerr
}

// pumpState is a pump's state, owned by its goroutine.
type pumpState struct {
	r     *Relay
	keys  map[string]*keyQueue
	ready []*pending     // messages that may be handed over now
	held  map[int64]bool // seqs read and not settled: left out of the next fetch
	marks *marks         // acknowledged or dead, to mark with the next fetch

	window, chunk   int
	maxCalls        int // maxCalls, or maxEachCalls for an AckPublisher
	calls, inFlight int
	queued          int // read, not handed over yet
	read            int
	handed          int // handed over to the publisher
	results         chan callResult
	reports         *reports // an AckPublisher's reports
	spare           []report // the reports' slice taken last, to fill again
	fetched         chan fetchResult
	fetching        bool
	exhausted       bool // a fetch read less than a batch
	stopped         bool // no more fetches or calls: a stop, the deadline, the broker down
	down            bool // a call acknowledged nothing: the broker down or silent
	failed          int
	lastErr         error
	fetchErr        *roundError
}

// outstanding is how many messages the pump holds that are not settled.
func (p *pumpState) outstanding() int { return p.queued + p.inFlight }

// dispatch hands ready messages to the publisher, in calls of up to a
// chunk, while calls and the window allow.
func (p *pumpState) dispatch(ctx context.Context) {
	for !p.stopped && len(p.ready) > 0 && p.calls < p.maxCalls && p.inFlight < p.window {
		n := min(len(p.ready), p.chunk, p.window-p.inFlight)
		c := &call{msgs: p.ready[:n:n]}
		p.ready = p.ready[n:]
		p.calls++
		p.inFlight += n
		p.queued -= n
		p.handed += n
		msgs := make([]outbox.Message, n)
		for i, m := range c.msgs {
			msgs[i] = m.msg
		}
		if p.r.ackPub == nil {
			go func() {
				deadline, err := p.r.publish(ctx, msgs)
				p.results <- callResult{call: c, err: err, deadline: deadline}
			}()
			continue
		}
		for _, m := range c.msgs {
			m.call = c
		}
		go func() {
			deadline, err := p.r.publishEach(ctx, msgs, func(i int, err error) {
				if 0 <= i && i < len(c.msgs) {
					p.reports.add(c.msgs[i], err)
				}
			})
			p.results <- callResult{call: c, err: err, deadline: deadline}
		}()
	}
}

// takeReports settles the messages an AckPublisher reported.
func (p *pumpState) takeReports() {
	list := p.reports.take(p.spare)
	for _, rep := range list {
		m := rep.m
		if m.settled || m.call == nil {
			continue // reported twice: the first report holds
		}
		m.call.reported++
		if p.settleOne(m, rep.err) {
			m.call.progress = true
		}
	}
	clear(list)
	p.spare = list
}

// settle takes a call's outcome: acknowledged and dead messages to mark,
// their keys' next messages ready; a failed message's key blocked. The
// messages of an AckPublisher's call that it did not report fail with
// the call's error.
func (p *pumpState) settle(res callResult) {
	p.calls--
	c := res.call
	if p.r.ackPub != nil {
		// Every report of the call was recorded before it returned.
		p.takeReports()
		for _, m := range c.msgs {
			if m.settled {
				continue
			}
			err := res.err
			if err == nil {
				err = errors.New("pgoutbox: the publisher reported neither an acknowledgement nor an error")
			}
			p.settleOne(m, err)
		}
		if !c.progress && (res.deadline || c.reported == 0) {
			p.stopped, p.down = true, true
		}
		return
	}
	acked := outbox.Acknowledged(res.err, len(c.msgs))
	var be *outbox.BatchError
	perMessage := errors.As(res.err, &be) && len(be.Errs) == len(c.msgs)
	for i, m := range c.msgs {
		var err error
		switch {
		case acked[i]:
		case perMessage && be.Errs[i] != nil:
			err = be.Errs[i]
		case perMessage:
			err = errors.New("pgoutbox: the publisher acknowledged the message neither way")
		default:
			err = res.err
		}
		if p.settleOne(m, err) {
			c.progress = true
		}
	}
	if !c.progress && (res.deadline || !perMessage) {
		p.stopped, p.down = true, true
	}
}

// settleOne settles m, acknowledged when err is nil: marked sent or
// dead, its key's next message ready; or failed, its key blocked. It
// reports progress: m acknowledged or dead.
func (p *pumpState) settleOne(m *pending, err error) (progress bool) {
	m.settled = true
	p.inFlight--
	delete(p.held, m.seq)
	k := p.keys[m.msg.OrderingKey]
	if k != nil {
		k.out = false
	}
	if p.marks.start.IsZero() || m.read.Before(p.marks.start) {
		p.marks.start = m.read
	}
	if err == nil {
		p.marks.acked = append(p.marks.acked, m.seq)
		p.marks.oldest = max(p.marks.oldest, m.age+time.Since(m.read))
		p.next(k)
		return true
	}
	if errors.Is(err, outbox.ErrPermanent) && !p.r.cfg.holdRefused {
		p.marks.dead = append(p.marks.dead, m.seq)
		p.marks.deadIDs = append(p.marks.deadIDs, m.msg.ID)
		p.marks.deadErrs = append(p.marks.deadErrs, err.Error())
		p.marks.errs = append(p.marks.errs, fmt.Errorf("message %s: %w", m.msg.ID, err))
		p.next(k)
		return true
	}
	p.failed++
	p.lastErr = err
	if k != nil {
		k.blocked = true
	}
	return false
}

// next makes k's next message ready, if k is not blocked.
func (p *pumpState) next(k *keyQueue) {
	if k == nil || k.blocked || len(k.queue) == 0 {
		return
	}
	p.ready = append(p.ready, k.queue[0])
	k.queue = k.queue[1:]
	k.out = true
}

// fetch marks what was settled and reads the next batch, leaving out
// what the pump holds, in a goroutine.
func (p *pumpState) fetch(ctx context.Context) {
	p.fetching = true
	m := p.marks
	p.marks = &marks{}
	exclude := make(map[int64]bool, len(p.held))
	for s := range p.held {
		exclude[s] = true
	}
	go func() {
		batch, err := p.r.markAndFetch(ctx, m, p.r.cfg.batch+len(exclude), exclude)
		p.fetched <- fetchResult{batch: batch, marks: m, asked: p.r.cfg.batch, err: err}
	}()
}

// take takes a fetch's outcome: the marks reported, the batch queued
// behind what the pump holds of each key.
func (p *pumpState) take(ctx context.Context, f fetchResult) {
	p.fetching = false
	if f.err != nil {
		if f.marks.empty() {
			p.fetchErr = &roundError{op: "fetch", err: f.err}
		} else {
			// The marks were in the failed transaction: their messages
			// are published again.
			p.fetchErr = &roundError{op: "mark", err: f.err, messages: f.marks.count()}
		}
		p.stopped = true
		return
	}
	p.r.marked(ctx, f.marks)
	if len(f.batch) < f.asked {
		p.exhausted = true
	}
	p.read += len(f.batch)
	for _, m := range f.batch {
		key := m.msg.OrderingKey
		p.held[m.seq] = true
		p.queued++
		if key == "" {
			p.ready = append(p.ready, m)
			continue
		}
		k := p.keys[key]
		if k == nil {
			k = &keyQueue{}
			p.keys[key] = k
		}
		if k.blocked {
			// Behind a failed message: it waits for a later pump.
			delete(p.held, m.seq)
			p.queued--
			continue
		}
		if !k.out {
			p.ready = append(p.ready, m)
			k.out = true
			continue
		}
		k.queue = append(k.queue, m)
	}
}

// publish calls the publisher, bounded by PublishTimeout, recovering a
// panic as an error. deadline reports that the call's context ended
// before it returned.
func (r *Relay) publish(ctx context.Context, msgs []outbox.Message) (deadline bool, err error) {
	pctx, cancel := context.WithTimeout(ctx, r.cfg.publishTimeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("pgoutbox: the publisher panicked: %v", p)
		}
		deadline = pctx.Err() != nil
	}()
	return false, r.pub.Publish(pctx, msgs)
}

// publishEach calls the AckPublisher, as publish calls the publisher.
func (r *Relay) publishEach(ctx context.Context, msgs []outbox.Message, ack func(int, error)) (deadline bool, err error) {
	pctx, cancel := context.WithTimeout(ctx, r.cfg.publishTimeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("pgoutbox: the publisher panicked: %v", p)
		}
		deadline = pctx.Err() != nil
	}()
	return false, r.ackPub.PublishEach(pctx, msgs, ack)
}
