package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dedup-go/dedup/store/memstore"
)

// The broker rows share their message and their naming: every side of
// every run consumes n fresh orders from a queue, topic or stream of its
// own, so that no run sees another's messages or its leftovers.

// ordersJSON returns n distinct orders, encoded, and their ids.
func ordersJSON(n int) (bodies [][]byte, keys []string) {
	bodies, keys = make([][]byte, n), make([]string, n)
	for i := range n {
		keys[i] = fmt.Sprintf("o-%09d", i)
		bodies[i], _ = json.Marshal(order{ID: keys[i], Amount: i})
	}
	return bodies, keys
}

var names atomic.Int64

// uniqueName is a queue, topic or stream name no other run uses, on this
// machine's shared brokers too (the process id and start time tell
// concurrent benchmark processes apart).
func uniqueName(kind string) string {
	return fmt.Sprintf("bench_%s_%d_%d_%d", kind, os.Getpid(), start, names.Add(1))
}

var start = time.Now().UnixMilli() % 1_000_000

// tally counts handled orders and checks that each was handled once: the
// sum of their amounts is known.
type tally struct {
	n     int
	seen  atomic.Int64
	sum   atomic.Int64
	first atomic.Int64 // when the first order was handled, in Unix nanoseconds
	last  atomic.Int64 // when the n-th order was handled, in Unix nanoseconds
	// the process's CPU time when the first and the n-th order were handled
	cpuFirst, cpuLast atomic.Int64
	done              chan struct{}
}

func newTally(n int) *tally { return &tally{n: n, done: make(chan struct{})} }

// add records an order; it closes done at the n-th.
func (t *tally) add(o order) {
	if t.first.Load() == 0 && t.first.CompareAndSwap(0, time.Now().UnixNano()) {
		t.cpuFirst.Store(int64(processCPU()))
	}
	t.sum.Add(int64(o.Amount))
	if t.seen.Add(1) == int64(t.n) {
		t.cpuLast.Store(int64(processCPU()))
		t.last.Store(time.Now().UnixNano())
		close(t.done)
	}
}

// handlingRate is the rate, in orders per second, from the first order
// handled to the last: what comes before the first (connecting, joining a
// consumer group) and after the last (the final commit, closing the
// consumer) is no message's cost, and differs between clients more than
// the handling does (Watermill's Kafka subscriber takes about 500 ms to
// close). Call it after done is closed.
func (t *tally) handlingRate() float64 {
	elapsed := time.Duration(t.last.Load() - t.first.Load())
	return float64(t.n) / max(elapsed, time.Nanosecond).Seconds()
}

// cpuPerOrder is the process's CPU time (user + sys, every thread) per
// order, in nanoseconds, over the span of handlingRate. Call it after done
// is closed.
func (t *tally) cpuPerOrder() float64 {
	return float64(t.cpuLast.Load()-t.cpuFirst.Load()) / float64(t.n)
}

// closing is how long ago the last order was handled: called when a
// side's consume returns, what its stopping and closing took.
func (t *tally) closing() time.Duration {
	return time.Since(time.Unix(0, t.last.Load()))
}

// sample is a side's sample from its tally, once consume returned:
// the handling rate, CPU per order over the same span, and the time its
// closing took.
func (t *tally) sample() sample {
	return sample{value: t.handlingRate(), cpu: t.cpuPerOrder(), closing: t.closing()}
}

// check fails tb unless every order was handled exactly once.
func (t *tally) check(tb testing.TB, side string) {
	tb.Helper()
	if got, want := t.sum.Load(), int64(t.n)*int64(t.n-1)/2; got != want || t.seen.Load() != int64(t.n) {
		tb.Fatalf("%s: handled %d orders summing to %d, want %d summing to %d", side, t.seen.Load(), got, t.n, want)
	}
}

// orderStore is the memstore of a dedup side consuming n orders: room for
// every one of them (Capacity is the number of records kept).
func orderStore(tb testing.TB, n int) *memstore.Store {
	st, err := memstore.New(&memstore.Options{Capacity: n + 1000})
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// decode is the handler's work on every side: the body into an order.
func decode(body []byte) (order, error) {
	var o order
	err := json.Unmarshal(body, &o)
	return o, err
}
