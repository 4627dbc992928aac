package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/sagatest"
)

// kitLease is the receivers' lease in the kit tests. redisstore stamps a
// lease with the real clock of the process that claims it and judges its
// end by the real clock of the process that acquires, not by the
// harness's fake one: a crashed claim is taken over only once this much
// real time has passed.
const kitLease = 250 * time.Millisecond

// TestKitSagaSurvivesCrashesBetweenSteps: the order saga (sagatest) under
// the kit over redisstore (the shared Redis, keys under a prefix of the
// test's own, deleted when it ends), leases ending on the real clock,
// three copies of each order over two processes: without a fault, with a
// worker dying after the Nth step record of every order, and at every
// boundary at once.
func TestKitSagaSurvivesCrashesBetweenSteps(t *testing.T) {
	t.Parallel()
	sagatest.CrashesBetweenSteps(t, func(t *testing.T, faults ...deduptest.Fault) *sagatest.Rig {
		// The fake clock's time carries no monotonic reading (Round(0)):
		// catchUp compares it with the wall clock, which redisstore
		// stamps leases with.
		return sagatest.NewRig(t, newStore(t, redistest.Client(t), nil), time.Now().Round(0), kitLease, catchUp, faults...)
	})
}

// catchUp waits until the real clock has reached clk's time, or ctx
// ends. It reads the wall clock again after each wait, since the wall
// clock may be slewed while it waits.
func catchUp(ctx context.Context, clk *clock.Fake) {
	for {
		ahead := time.Until(clk.Now().Round(0))
		if ahead <= 0 {
			return
		}
		wait := time.NewTimer(ahead)
		select {
		case <-wait.C:
		case <-ctx.Done(): // the delivery answers so
			wait.Stop()
			return
		}
	}
}
