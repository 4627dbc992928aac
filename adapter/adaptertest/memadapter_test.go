package adaptertest_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/adapter/adaptertest"
	"github.com/dedup-go/dedup/delivery"
)

// The in-memory broker and adapter below are the suite's own test: a
// correct adapter passes it (TestMemAdapter), and each flaw of
// TestBrokenAdapters, put into the adapter, fails the rule it breaks.

// memMsg is one message of the in-memory queue.
type memMsg struct {
	tag    int64
	data   []byte
	id     string
	header map[string]string
	count  int // deliveries so far
}

// memBroker is a queue with acks, delayed requeues and a dead-letter
// queue, as a broker has.
type memBroker struct {
	name string

	mu      sync.Mutex
	next    int64
	ready   []*memMsg
	unacked map[int64]*memMsg
	dead    []adaptertest.DeadLetter
	changed chan struct{} // closed and replaced when ready or dead grows
	timers  sync.WaitGroup
}

func newBroker(name string) *memBroker {
	return &memBroker{name: name, unacked: map[int64]*memMsg{}, changed: make(chan struct{})}
}

func (b *memBroker) signal() {
	close(b.changed)
	b.changed = make(chan struct{})
}

func (b *memBroker) publish(m adaptertest.Message) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	b.ready = append(b.ready, &memMsg{tag: b.next, data: m.Data, id: m.ID, header: maps.Clone(m.Header)})
	b.signal()
}

// get takes the next ready message, waiting for one until stop or ctx.
func (b *memBroker) get(ctx context.Context, stop <-chan struct{}) (*memMsg, bool) {
	for {
		b.mu.Lock()
		if len(b.ready) > 0 {
			m := b.ready[0]
			b.ready = b.ready[1:]
			m.count++
			b.unacked[m.tag] = m
			b.mu.Unlock()
			return m, true
		}
		changed := b.changed
		b.mu.Unlock()
		select {
		case <-changed:
		case <-stop:
			return nil, false
		case <-ctx.Done():
			return nil, false
		}
	}
}

// ack removes an unacked message; false when it is not (acked already).
func (b *memBroker) ack(tag int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.unacked[tag]
	delete(b.unacked, tag)
	return ok
}

// nack hands an unacked message back after delay.
func (b *memBroker) nack(tag int64, delay time.Duration) bool {
	b.mu.Lock()
	m, ok := b.unacked[tag]
	delete(b.unacked, tag)
	b.mu.Unlock()
	if !ok {
		return false
	}
	b.timers.Add(1)
	time.AfterFunc(delay, func() {
		defer b.timers.Done()
		b.mu.Lock()
		defer b.mu.Unlock()
		b.ready = append(b.ready, m)
		b.signal()
	})
	return true
}

func (b *memBroker) deadLetter(dl adaptertest.DeadLetter) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dead = append(b.dead, dl)
	b.signal()
}

func (b *memBroker) deadLetters(ctx context.Context, n int) ([]adaptertest.DeadLetter, error) {
	for {
		b.mu.Lock()
		dead := append([]adaptertest.DeadLetter(nil), b.dead...)
		changed := b.changed
		b.mu.Unlock()
		if len(dead) >= n {
			return dead, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return dead, ctx.Err()
		}
	}
}

// flaw is a rule the in-memory adapter breaks, for TestBrokenAdapters.
type flaw string

const (
	flawNone           flaw = ""
	flawAckFirst       flaw = "ack-first"        // acks on receipt (auto-ack), before the outcome
	flawSettleTwice    flaw = "settle-twice"     // reports a delivery settled twice
	flawDropDeadLetter flaw = "drop-dead-letter" // counts a dead letter it never published
	flawStopEarly      flaw = "stop-early"       // Stop returns without waiting for handlers
	flawLeak           flaw = "leak"             // a goroutine of Start outlives Stop
	flawNoSource       flaw = "no-source"        // dead letters without Dedup-Source
)

// memConsumer is a correct adapter of memBroker, unless given a flaw.
type memConsumer[T, R any] struct {
	b     *memBroker
	rcv   *adapter.Receiver[*dedup.Message[T], R]
	flaw  flaw
	stats struct{ delivered, acked, retried, dead, failures atomic.Uint64 }

	mu      sync.Mutex
	started bool
	stop    chan struct{}
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	stopped chan struct{}
	leak    chan struct{}
}

var _ dedup.Consumer = (*memConsumer[struct{}, struct{}])(nil)

var errConfig = errors.New("memadapter: receiver is nil")

func newMemConsumer[T, R any](b *memBroker, rcv *dedup.Receiver[*dedup.Message[T], R], fl flaw) (*memConsumer[T, R], error) {
	bound := adapter.Bind(rcv)
	if bound == nil {
		return nil, errors.Join(dedup.ErrInvalidConfig, errConfig)
	}
	return &memConsumer[T, R]{b: b, rcv: bound, flaw: fl, stop: make(chan struct{}), stopped: make(chan struct{}), leak: make(chan struct{})}, nil
}

func (c *memConsumer[T, R]) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return errors.New("memadapter: started already")
	}
	c.started = true
	work, cancel := context.WithCancel(ctx)
	c.cancel = cancel
	for range 4 {
		c.wg.Go(func() { c.work(work) })
	}
	if c.flaw == flawLeak {
		go func() { <-c.leak }() // never closed
	}
	go func() {
		c.wg.Wait()
		cancel()
		close(c.stopped)
	}()
	return nil
}

func (c *memConsumer[T, R]) Stop(ctx context.Context) error {
	c.mu.Lock()
	if !c.started {
		c.mu.Unlock()
		return nil
	}
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	c.mu.Unlock()
	if c.flaw == flawStopEarly {
		return nil
	}
	select {
	case <-c.stopped:
		return nil
	case <-ctx.Done():
		c.cancel()
		return ctx.Err()
	}
}

func (c *memConsumer[T, R]) Stopped() <-chan struct{} { return c.stopped }

func (c *memConsumer[T, R]) Err() error { return nil }

func (c *memConsumer[T, R]) Stats() dedup.ConsumerStats {
	s := &c.stats
	return dedup.ConsumerStats{
		Delivered: s.delivered.Load(), Acked: s.acked.Load(), RetriedInPlace: s.retried.Load(),
		DeadLettered: s.dead.Load(), SettleFailures: s.failures.Load(),
	}
}

func (c *memConsumer[T, R]) work(ctx context.Context) {
	for {
		m, ok := c.b.get(ctx, c.stop)
		if !ok {
			return
		}
		c.handle(ctx, m)
	}
}

func (c *memConsumer[T, R]) handle(ctx context.Context, m *memMsg) {
	c.stats.delivered.Add(1)
	if c.flaw == flawAckFirst && c.b.ack(m.tag) {
		c.stats.acked.Add(1)
	}
	env := &dedup.Message[T]{
		Data: m.data, Header: header(m.header), ID: m.id, Source: c.b.name, Broker: "memory",
		DeliveryCount: m.count, Redelivered: m.count > 1,
	}
	var dlv adapter.Delivery[R]
	if err := adapter.DecodeBody(dedup.JSONDecoder{}, env); err != nil {
		dlv = c.rcv.Refused(ctx, env, err)
	} else {
		dlv = c.rcv.Deliver(ctx, env)
	}
	c.settle(m, &dlv)
}

func header(h map[string]string) delivery.Header {
	if len(h) == 0 {
		return nil
	}
	mh := delivery.MapHeader{}
	for k, v := range h {
		mh[k] = []string{v}
	}
	return mh
}

func (c *memConsumer[T, R]) settle(m *memMsg, dlv *adapter.Delivery[R]) {
	begin := time.Now()
	d := dlv.Decision
	var err error
	switch d.Action {
	case delivery.Ack:
		if c.b.ack(m.tag) {
			c.stats.acked.Add(1)
		} else if c.flaw != flawAckFirst {
			err = errors.New("memadapter: ack of a message not unacked")
		}
	case delivery.Retry:
		if c.b.nack(m.tag, d.Delay) {
			c.stats.retried.Add(1)
		} else if c.flaw != flawAckFirst {
			err = errors.New("memadapter: nack of a message not unacked")
		}
	case delivery.DeadLetter:
		h := delivery.MapHeader{}
		for k, v := range m.header {
			h[k] = []string{v}
		}
		h[delivery.HeaderReason] = []string{string(d.Reason)}
		if c.flaw != flawNoSource {
			h[delivery.HeaderSource] = []string{c.b.name}
		}
		if dlv.Result.Key != "" {
			h[delivery.HeaderKey] = []string{dlv.Result.Key}
		}
		if m.id != "" {
			h[delivery.HeaderOriginalMessageID] = []string{m.id}
		}
		if d.Err != nil {
			h[delivery.HeaderError] = []string{d.Err.Error()}
		}
		h[delivery.HeaderDeliveryCount] = []string{strconv.Itoa(m.count)}
		c.rcv.Inject(dlv.Context(), func(k, v string) { h[k] = []string{v} })
		if c.flaw != flawDropDeadLetter {
			c.b.deadLetter(adaptertest.DeadLetter{Header: h, Data: m.data})
		}
		c.b.ack(m.tag)
		c.stats.dead.Add(1)
	}
	if err != nil {
		c.stats.failures.Add(1)
	}
	s := adapter.Settlement{Duration: time.Since(begin), Err: err}
	if c.flaw == flawSettleTwice {
		twin := *dlv
		twin.Settled(s)
	}
	dlv.Settled(s)
}

// memHarness is the suite's harness over a fresh memBroker per source.
func memHarness(fl flaw, timeout time.Duration) adaptertest.Harness {
	return adaptertest.Harness{
		Timeout: timeout,
		NewSource: func(t *testing.T) adaptertest.Source {
			b := newBroker("mem." + t.Name())
			t.Cleanup(func() { b.timers.Wait() })
			return adaptertest.Source{
				Name: b.name,
				Publish: func(_ context.Context, m adaptertest.Message) error {
					b.publish(m)
					return nil
				},
				NewConsumer: func(rcv *dedup.Receiver[*dedup.Message[adaptertest.Order], adaptertest.Receipt]) (dedup.Consumer, error) {
					return newMemConsumer(b, rcv, fl)
				},
				DeadLetters: b.deadLetters,
			}
		},
	}
}

// flawEnv names the flaw a child process of TestBrokenAdapters puts into
// the adapter.
const flawEnv = "ADAPTERTEST_FLAW"

// TestMemAdapter runs the suite against the in-memory adapter: correct,
// or, in a child process of TestBrokenAdapters, with the flaw it names.
func TestMemAdapter(t *testing.T) {
	fl := flaw(os.Getenv(flawEnv))
	timeout := time.Duration(0) // the suite's default
	if fl != flawNone {
		timeout = 2 * time.Second // expected to fail: fail fast
	}
	adaptertest.Run(t, memHarness(fl, timeout))
}

// TestBrokenAdapters runs the suite, in a child process, against the
// in-memory adapter with one flaw at a time, and requires it to fail the
// subtests of the rule the flaw breaks.
func TestBrokenAdapters(t *testing.T) {
	if os.Getenv(flawEnv) != "" {
		t.Skip("a child process of TestBrokenAdapters")
	}
	for fl, failing := range map[flaw][]string{
		flawAckFirst:       {"Lifecycle", "HardStop"},
		flawSettleTwice:    {"Lifecycle", "Duplicate", "Undecodable", "SettledOnce"},
		flawDropDeadLetter: {"Undecodable"},
		flawStopEarly:      {"Lifecycle"},
		flawLeak:           {"NoLeaks"},
		flawNoSource:       {"Undecodable"},
	} {
		t.Run(string(fl), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestMemAdapter$", "-test.count=1")
			cmd.Env = append(os.Environ(), flawEnv+"="+string(fl))
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the suite passed, or did not run (%v), against an adapter that breaks a rule (%s); its output:\n%s", err, fl, out)
			}
			for _, sub := range failing {
				if !strings.Contains(string(out), "--- FAIL: TestMemAdapter/"+sub+" ") {
					t.Errorf("the suite's %s did not fail against an adapter with flaw %s; its output:\n%s", sub, fl, out)
				}
			}
		})
	}
}
