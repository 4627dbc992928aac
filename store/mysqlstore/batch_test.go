package mysqlstore_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/mysqlstore"
)

// TestBatchesDoNotDeadlock: two batches that claim the same keys in
// opposite orders at the same moment never wait on each other crosswise:
// the store claims a batch's rows in key order, and completes and extends
// them in key order too. Each key is claimed once, completed once; no
// statement had to run again after a deadlock.
func TestBatchesDoNotDeadlock(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	s := d.store(t, nil)
	for round := range 10 {
		reqs := make([]store.AcquireRequest, 200)
		for i := range reqs {
			reqs[i] = store.AcquireRequest{Key: fmt.Sprintf("r%d:%03d", round, i), Lease: time.Minute}
		}
		reversed := slices.Clone(reqs)
		slices.Reverse(reversed)
		var (
			wg    sync.WaitGroup
			outs  [2][]store.AcquireOutcome
			start = make(chan struct{})
		)
		for n, batch := range [][]store.AcquireRequest{reqs, reversed} {
			wg.Go(func() {
				<-start
				outs[n] = s.AcquireBatch(t.Context(), batch)
			})
		}
		close(start)
		testenv.Wait(t, &wg, "the two batches")
		var completes [2][]store.CompleteRequest
		claimed := 0
		for n, out := range outs {
			for _, o := range out {
				require.NoError(t, o.Err)
				if o.Claim.Acquired {
					claimed++
					completes[n] = append(completes[n], store.CompleteRequest{Key: o.Claim.Record.Key, Token: o.Claim.Token, Retention: time.Hour})
					completes[1-n] = append(completes[1-n], store.CompleteRequest{Key: o.Claim.Record.Key, Token: o.Claim.Token, Retention: time.Hour})
				}
			}
		}
		require.Equal(t, len(reqs), claimed, "every key claimed exactly once")
		slices.Reverse(completes[1])
		var reports [2][]store.CompleteOutcome
		start = make(chan struct{})
		for n := range completes {
			wg.Go(func() {
				<-start
				reports[n] = s.CompleteBatchReport(t.Context(), completes[n])
			})
		}
		close(start)
		testenv.Wait(t, &wg, "the two completions")
		wrote := 0
		for _, out := range reports {
			for _, o := range out {
				require.NoError(t, o.Err)
				if o.Completion == store.CompletionWrote {
					wrote++
				}
			}
		}
		require.Equal(t, len(reqs), wrote, "each record written by one of the two completions, found completed by the other")
	}
	require.Zero(t, mysqlstore.Retried(s), "deadlocks")
}
