package pgstore_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
)

// TestBatchesDoNotDeadlock: two batches that claim the same keys in
// opposite orders at the same moment never wait on each other crosswise
// (PostgreSQL would abort one with a deadlock): the store claims a batch's
// rows in key order. Each key is claimed once.
func TestBatchesDoNotDeadlock(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	s := db.store(t, nil)
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
		claimed := 0
		for _, out := range outs {
			for _, o := range out {
				require.NoError(t, o.Err)
				if o.Claim.Acquired {
					claimed++
				}
			}
		}
		require.Equal(t, len(reqs), claimed, "every key claimed exactly once")
	}
}
