// Package deduptest tests a handler the way a broker treats it: every
// message delivered several times, concurrently and out of order, to more
// than one process, retried as the receiver decides, with the store
// failing under it, and a worker crashing between its effect and the
// record.
//
// [Run] is the redelivery harness. It delivers each message Copies times
// (3 by default) from several workers in shuffled order to the processes
// of a service ([Replicas]: two receivers over one store by default; or a
// single receiver, or any [Target]), on a [clock.Fake] that it
// moves itself: a Retry is redelivered once the clock reaches its delay, a
// dead letter is recorded, until every copy is acknowledged or
// dead-lettered. Give it Replicas: copies in one receiver wait for the
// first instead of taking the key over once its lease is lost, so only a
// second process shows a handler that goes on after losing its lease.
// It returns a [Report]: per message, every delivery's status, decision,
// key, replica and replayed result, the handler runs, the effects
// counted, and the problems found, the causes first (a delivery that did
// not return, copies that got different keys, a double effect, an
// acknowledged message whose effect never happened, a step's effect or a
// compensation twice, a compensation without its step, a duplicate
// replayed another result than the first, a copy never settled, a fault
// asked for that never fired). A Report is a value: inspect it, print it, or fail a
// test with [Report.Check], which takes any [TB].
//
// A *dedup.Receiver is handed to Run, or built by the function given to
// Replicas, bound as an adapter binds it: adapter.Bind(rcv), whose Deliver
// hands a message to the receiver and answers the decision an adapter
// carries out.
//
//	service := deduptest.Replicas(func(int) (*adapter.Receiver[Order, Receipt], error) {
//		rcv, err := dedup.NewReceiver(mem, byID, handler, &dedup.Config{Clock: clk})
//		if err != nil {
//			return nil, err
//		}
//		return adapter.Bind(rcv), nil
//	})
//	rep, err := deduptest.Run(ctx, clk, service, orders, &deduptest.Options[Order]{ID: idOf})
//	// one process: deduptest.Run(ctx, clk, adapter.Bind(rcv), orders, nil)
//
// [FaultStore] wraps a store.Store (memstore, or the store you deploy)
// and fails, delays or hangs chosen operations by call number or
// probability, loses the answer of an operation it applied, answers
// store.ErrLeaseLost, or crashes the worker after the effect ([Crash]):
// the completion is dropped, and Run redelivers the message once the
// lease has run out, so you see what the handler does when a worker dies
// between its effect and the record. Give Run the FaultStore
// (Options.Faults) and a fault that never fired is a problem
// ([FaultNotInjected]): a Crash fault never reaches a handler that
// completes the record itself (pgstore's TxHandler), which is crashed
// from inside instead, by returning an error that wraps [ErrCrashed].
//
// [Effects] counts a handler's effects by message id: for Run
// (Options.Effects), or, when a real broker or client delivered the
// messages, for [Effects.ExactlyOnce], which checks that every expected id
// had its effect once and reports the others as Run does, in a Report
// without deliveries.
//
// A handler of recorded steps (dedup.Step), with compensations that undo
// them when its message is given up (dedup.Config.Compensations), is
// tested the same way. [Effects.Step] and [Effects.Compensation] count a
// step's effect and a compensation's, by message id and step name, where
// the step's function does its effect and the compensation undoes it;
// give the Effects to Run (Options.Steps), and the Report has each
// message's Steps and Compensations, and names a step whose effect
// happened more than once ([DoubleStep]), a compensation that ran more
// than once ([DoubleCompensation]), and one that ran without its step's
// effect before it ([CompensationWithoutStep]). The FaultStore passes
// step records through to a store that keeps them ([OpSaveStep],
// [OpLoadSteps]), and tells the receiver whether it does
// (store.StepsKept). A Crash fault on OpSaveStep is the worker dying
// between two steps: the step's record is written, then the worker dies,
// and Run redelivers the message after the lease, whose next run replays
// the recorded steps and goes on. Its Calls picks the boundary (call N:
// after the Nth step record of the messages it matches), so a run per N
// crashes a saga at every one of them, the compensations' records
// included. The crash between a step's effect and its record is not
// this fault: that window is one steps narrow, not close (the step runs
// again), and an idempotency key closes it.
//
// The package imports only the standard library and dedup's core
// packages; it works with testing.T and with any test framework.
package deduptest

import (
	"context"
	"time"

	"github.com/dedup-go/dedup/clock"
)

// Sleep waits d on clk (Run moves a fake clock while deliveries wait), or
// until ctx ends, and returns ctx's cause then. A handler under test uses
// it to take time on the harness's clock.
func Sleep(ctx context.Context, clk clock.Clock, d time.Duration) error {
	wake := make(chan struct{})
	t := clk.AfterFunc(d, func() { close(wake) })
	defer t.Stop()
	select {
	case <-wake:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
