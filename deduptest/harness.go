package deduptest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
)

// Target is what Run delivers to: a receiver bound as an adapter binds it
// (adapter.Bind(rcv), a *adapter.Receiver), an adapter-shaped function
// (TargetFunc), or several processes sharing one store (Replicas).
type Target[M, R any] interface {
	Deliver(ctx context.Context, msg M) adapter.Delivery[R]
}

// Replicas returns a Target that stands for several processes of one
// service sharing a store, as a broker spreads a queue over them: Run
// builds Options.Replicas of them (2 by default) with newReplica, called
// with each replica's number from 0, and delivers copy i of every message
// to replica i mod Replicas, redeliveries included. Each replica needs its
// own receiver (dedup.NewReceiver, returned as adapter.Bind(rcv)) over the
// one store: copies in one
// receiver wait for the first (the receiver's singleflight), while a copy
// in another process goes on asking the store, takes the key over once a
// lease has run out, and runs the handler again. Only so does a run show a
// handler that goes on after losing its lease (double-effect).
//
// Outside Run, the Target delivers to replica 0, built at its first
// delivery.
func Replicas[M, R any, T Target[M, R]](newReplica func(replica int) (T, error)) Target[M, R] {
	return &replicas[M, R]{build: func(i int) (Target[M, R], error) {
		t, err := newReplica(i)
		if err != nil {
			return nil, fmt.Errorf("deduptest: replica %d: %w", i, err)
		}
		if isNil(t) {
			return nil, fmt.Errorf("deduptest: replica %d is nil", i)
		}
		return t, nil
	}}
}

type replicas[M, R any] struct {
	build func(replica int) (Target[M, R], error)

	once  sync.Once
	first Target[M, R]
	err   error
}

// Deliver delivers to replica 0, outside Run.
func (rs *replicas[M, R]) Deliver(ctx context.Context, msg M) adapter.Delivery[R] {
	rs.once.Do(func() { rs.first, rs.err = rs.build(0) })
	if rs.err != nil {
		return adapter.Delivery[R]{Err: rs.err}
	}
	return rs.first.Deliver(ctx, msg)
}

// isNil reports whether v is nil, or a nil pointer, map, func, channel,
// slice or interface in an interface.
func isNil(v any) bool {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Invalid:
		return true
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Slice, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// TargetFunc adapts a function to Target: one delivery, handled and
// decided (an adapter.Delivery built by hand carries Result, Err and
// Decision; its Settled does nothing).
type TargetFunc[M, R any] func(ctx context.Context, msg M) adapter.Delivery[R]

// Deliver calls f.
func (f TargetFunc[M, R]) Deliver(ctx context.Context, msg M) adapter.Delivery[R] { return f(ctx, msg) }

// Defaults of Options.
const (
	defaultReplicas      = 2
	defaultCopies        = 3
	defaultWorkers       = 4
	defaultMaxDeliveries = 50
	defaultTimeout       = 20 * time.Second
	defaultIdle          = 2 * time.Millisecond
)

// Options configures Run. A nil *Options means all defaults; a zero
// field takes its default.
type Options[M any] struct {
	// Replicas is how many processes a target made by Replicas stands
	// for: Run builds that many, and delivers copy i of each message to
	// replica i mod Replicas. A target given directly is one process, and
	// takes no Replicas above 1. Default 2 (for a target made by
	// Replicas).
	Replicas int
	// Copies is how many times each message is delivered (each copy is
	// redelivered until it is acknowledged or dead-lettered). Default 3.
	Copies int
	// Workers is how many deliveries run at once. Default 4.
	Workers int
	// Seed seeds the shuffle of the copies, so that a run can be repeated.
	Seed uint64
	// ID names a message in the Report and for Effects. Default: "#" and
	// its index in the messages given to Run.
	ID func(M) string
	// Effects returns how many times the effect of the message with this
	// id happened (see Effects.Count). Nil: effects are not checked.
	Effects func(id string) int
	// Steps counts the effects of the handler's recorded steps
	// (dedup.Step) and of their compensations, by message id and step
	// name (Effects.Step, Effects.Compensation): Run reports a step whose
	// effect happened more than once (DoubleStep), a compensation that ran
	// more than once (DoubleCompensation), and a compensation that ran
	// without its step's effect before it (CompensationWithoutStep), and
	// fills each MessageReport's Steps and Compensations. It may be the
	// same Effects as the one Effects counts with. Nil: steps are not
	// checked.
	Steps *Effects
	// Lease is the receiver's Config.Lease: a delivery that crashed (a
	// Crash fault) is redelivered once it has run out. Default
	// (30 * time.Second).
	Lease time.Duration
	// Tick is how far the fake clock is moved when deliveries are running
	// but none finishes (a handler or a completion waiting on the clock).
	// Default Lease/10.
	Tick time.Duration
	// Idle is the real time Run lets running deliveries take before it
	// moves the clock by Tick. Default 2ms.
	Idle time.Duration
	// MaxDeliveries bounds the deliveries of one copy; a copy still not
	// settled after them is reported unsettled. Default 50.
	MaxDeliveries int
	// Timeout bounds the run in real time: what is not settled by then is
	// reported, with the deliveries still running. Default 20s.
	Timeout time.Duration
	// Faults are the FaultStores under the target. When the run ends, each
	// of their Faults that was not injected as asked (no call matched it,
	// or a call its Calls lists never came) is a FaultNotInjected problem:
	// the run did not test what it asked for, such as a Crash fault on
	// OpComplete under a handler that completes the record itself. Nil:
	// faults are not checked.
	Faults []*FaultStore
}

// Run delivers every message Copies times to target, from Workers
// goroutines in shuffled order, on the fake clock clk (the one the
// receiver's Config.Clock and its store's clock are). A target made by
// Replicas stands for several processes (2 by default), each copy
// delivered to one of them; give Run one, so that a handler going on
// after its lease was lost is seen. A delivery is carried out as an
// adapter would: Ack and DeadLetter settle its copy, a Retry redelivers
// it once the clock reaches the decision's Delay (Run moves clk when
// nothing else is to be done), and a delivery whose completion a Crash
// fault dropped is redelivered after Lease, unsettled.
// When every copy is settled (or MaxDeliveries or Timeout is reached) Run
// checks what happened and returns the Report, with the faults of
// Options.Faults that were not injected. It returns an error only for
// invalid arguments, and for a replica that could not be built. ctx ends
// the run early, as Timeout does.
//
// A target behind a real server (an HTTP or gRPC middleware whose
// receiver runs on the real clock) may leave its receiver on the real
// clock: clk then only paces the redeliveries, as a retrying client's
// backoff would, and leases and Crash faults are measured by the
// server's own clock.
func Run[M, R any](ctx context.Context, clk *clock.Fake, target Target[M, R], msgs []M, opts *Options[M]) (*Report[R], error) {
	if clk == nil || target == nil {
		return nil, errors.New("deduptest: Run needs a clock and a target")
	}
	var o Options[M]
	if opts != nil {
		o = *opts
	}
	if o.Replicas < 0 || o.Copies < 0 || o.Workers < 0 || o.MaxDeliveries < 0 || o.Lease < 0 || o.Tick < 0 || o.Idle < 0 || o.Timeout < 0 {
		return nil, errors.New("deduptest: Options fields must not be negative")
	}
	o.Copies = cmp.Or(o.Copies, defaultCopies)
	o.Workers = cmp.Or(o.Workers, defaultWorkers)
	o.MaxDeliveries = cmp.Or(o.MaxDeliveries, defaultMaxDeliveries)
	o.Lease = cmp.Or(o.Lease, (30 * time.Second))
	o.Tick = cmp.Or(o.Tick, o.Lease/10)
	o.Idle = cmp.Or(o.Idle, defaultIdle)
	o.Timeout = cmp.Or(o.Timeout, defaultTimeout)
	if slices.ContainsFunc(o.Faults, func(f *FaultStore) bool { return f == nil }) {
		return nil, errors.New("deduptest: Options.Faults holds a nil FaultStore")
	}
	targets := []Target[M, R]{target}
	if rs, ok := target.(*replicas[M, R]); ok {
		targets = make([]Target[M, R], cmp.Or(o.Replicas, defaultReplicas))
		for i := range targets {
			t, err := rs.build(i)
			if err != nil {
				return nil, err
			}
			targets[i] = t
		}
	} else if o.Replicas > 1 {
		return nil, fmt.Errorf("deduptest: Options.Replicas is %d, but one Target is one process: make the target with Replicas", o.Replicas)
	}
	rep := &Report[R]{Messages: make([]MessageReport[R], len(msgs)), Start: clk.Now(), Replicas: len(targets)}
	seen := make(map[string]int, len(msgs))
	for i, m := range msgs {
		id := fmt.Sprintf("#%d", i)
		if o.ID != nil {
			id = o.ID(m)
		}
		if j, dup := seen[id]; dup {
			return nil, fmt.Errorf("deduptest: messages %d and %d have the same id %q: give each message a distinct ID (copies are made by Run)", j, i, id)
		}
		seen[id] = i
		rep.Messages[i] = MessageReport[R]{ID: id, Index: i, Effects: -1, copies: make([]copyState, o.Copies)}
	}
	r := &run[M, R]{o: o, clk: clk, targets: targets, msgs: msgs, rep: rep}
	r.loop(ctx)
	rep.End = clk.Now()
	rep.check(o.Effects, o.Steps)
	rep.checkFaults(o.Faults)
	return rep, nil
}

// job is one delivery of one copy.
type job struct {
	msg, copy int
	due       time.Time
}

type outcome[R any] struct {
	job    job
	worker int
	d      adapter.Delivery[R]
}

type run[M, R any] struct {
	o       Options[M]
	clk     *clock.Fake
	targets []Target[M, R] // one per replica
	msgs    []M
	rep     *Report[R]
}

// replica returns the number of the replica that delivers copy c.
func (r *run[M, R]) replica(c int) int { return c % len(r.targets) }

// loop runs the deliveries until every copy is settled or the run ends.
func (r *run[M, R]) loop(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	rng := rand.New(rand.NewPCG(r.o.Seed, r.o.Seed+1))
	var ready, delayed []job
	for i := range r.msgs {
		for c := range r.o.Copies {
			ready = append(ready, job{msg: i, copy: c})
		}
	}
	rng.Shuffle(len(ready), func(i, j int) { ready[i], ready[j] = ready[j], ready[i] })

	jobs := make(chan job)
	done := make(chan outcome[R], r.o.Workers)
	exited := make(chan struct{}, r.o.Workers)
	for w := range r.o.Workers {
		go func() {
			defer func() { exited <- struct{}{} }()
			for j := range jobs {
				d := r.targets[r.replica(j.copy)].Deliver(ctx, r.msgs[j.msg])
				done <- outcome[R]{job: j, worker: w, d: d}
			}
		}()
	}
	// workers pick jobs from one channel: which worker took a job is
	// known when it answers; busy counts the jobs handed out.
	busy := 0
	inflight := map[job]bool{}
	deadline := time.NewTimer(r.o.Timeout)
	defer deadline.Stop()
	var advancing chan struct{}
	advance := func(to time.Time) {
		advancing = make(chan struct{})
		ch := advancing
		go func() { r.clk.Set(to); close(ch) }()
	}
	promote := func() {
		now := r.clk.Now()
		keep := delayed[:0]
		for _, j := range delayed {
			if !j.due.After(now) {
				ready = append(ready, j)
			} else {
				keep = append(keep, j)
			}
		}
		delayed = keep
	}
	idle := time.NewTimer(time.Hour)
	defer idle.Stop()
	idleArmed := false
	ended := ""
loop:
	for {
		var send chan job
		var next job
		if len(ready) > 0 && busy < r.o.Workers {
			send, next = jobs, ready[0]
		}
		if send == nil && advancing == nil {
			switch {
			case busy == 0 && len(delayed) == 0:
				break loop // every copy settled (or given up)
			case busy == 0:
				advance(slices.MinFunc(delayed, func(a, b job) int { return a.due.Compare(b.due) }).due)
			case !idleArmed:
				idle.Reset(r.o.Idle)
				idleArmed = true
			}
		}
		var advanced chan struct{}
		if advancing != nil {
			advanced = advancing
		}
		select {
		case send <- next:
			ready = ready[1:]
			busy++
			inflight[next] = true
		case out := <-done:
			busy--
			delete(inflight, out.job)
			if j, again := r.settle(out); again {
				if j.due.After(r.clk.Now()) {
					delayed = append(delayed, j)
				} else {
					ready = append(ready, j)
				}
			}
			idle.Stop() // Go 1.23 timers: no stale tick after Stop
			idleArmed = false
		case <-advanced:
			advancing = nil
			promote()
		case <-idle.C:
			idleArmed = false
			if advancing == nil && busy > 0 {
				to := r.clk.Now().Add(r.o.Tick)
				if len(delayed) > 0 {
					if d := slices.MinFunc(delayed, func(a, b job) int { return a.due.Compare(b.due) }).due; d.Before(to) {
						to = d
					}
				}
				advance(to)
			}
		case <-deadline.C:
			ended = fmt.Sprintf("the run reached its Timeout (%v)", r.o.Timeout)
			break loop
		case <-ctx.Done():
			ended = fmt.Sprintf("the run's context ended: %v", context.Cause(ctx))
			break loop
		}
	}
	close(jobs)
	cancel()
	if ended != "" {
		r.rep.Ended = ended
		for j := range inflight {
			r.rep.Messages[j.msg].Stuck++
		}
	}
	// Let the running deliveries end on the cancelled context; a handler
	// that ignores it is reported, and its goroutine left behind.
	grace := time.NewTimer(min(r.o.Timeout, 2*time.Second))
	defer grace.Stop()
	for left := r.o.Workers; left > 0; {
		select {
		case <-exited:
			left--
		case out := <-done:
			delete(inflight, out.job)
			r.rep.Messages[out.job.msg].record(out.job.copy, r.replica(out.job.copy), len(r.targets), out.d, r.clk.Now(), false)
		case <-advancing:
			advancing = nil
		case <-grace.C:
			for j := range inflight {
				r.rep.Messages[j.msg].Abandoned++
			}
			return
		}
	}
	if advancing != nil {
		select {
		case <-advancing:
		case <-grace.C:
		}
	}
}

// settle carries out the decision of a delivery, as an adapter would, and
// records it. It returns the copy's next delivery when there is one.
func (r *run[M, R]) settle(out outcome[R]) (job, bool) {
	m := &r.rep.Messages[out.job.msg]
	d := out.d
	now := r.clk.Now()
	crashed := errors.Is(d.Result.Problem, ErrCrashed) || errors.Is(d.Err, ErrCrashed)
	m.record(out.job.copy, r.replica(out.job.copy), len(r.targets), d, now, crashed)
	cs := &m.copies[out.job.copy]
	cs.deliveries++
	next := out.job
	switch {
	case crashed:
		// The worker died: the broker redelivers once the lease ran out.
		next.due = now.Add(r.o.Lease + time.Millisecond)
	case d.Decision.Action == delivery.Ack:
		d.Settled(adapter.Settlement{})
		cs.acked = true
		return job{}, false
	case d.Decision.Action == delivery.DeadLetter:
		d.Settled(adapter.Settlement{})
		cs.deadLettered = true
		return job{}, false
	default: // Retry, or no decision at all: redeliver
		d.Settled(adapter.Settlement{})
		next.due = now.Add(max(d.Decision.Delay, 0))
	}
	if cs.deliveries >= r.o.MaxDeliveries {
		cs.gaveUp = true
		return job{}, false
	}
	return next, true
}
