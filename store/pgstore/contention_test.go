package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/pgstore"
	"github.com/stretchr/testify/require"
)

// TestContentionNeverUnavailable: many workers claiming one key over and
// over, with leases that end while the others wait (1 to 3 ms: shorter
// than a statement takes under this load; and 50 to 200 ms), each get a
// claim or the live claim of another to wait for, never an error: a
// healthy database under contention is not unavailable. It holds in every
// isolation level the server may default to, for Acquire and for a batch
// that claims the key beside one of its own.
func TestContentionNeverUnavailable(t *testing.T) {
	t.Parallel()
	for _, iso := range []string{"read committed", "repeatable read", "serializable"} {
		for _, lease := range []struct {
			name     string
			min, max time.Duration
		}{{"1-3ms", time.Millisecond, 3 * time.Millisecond}, {"50-200ms", 50 * time.Millisecond, 200 * time.Millisecond}} {
			t.Run(iso+"/"+lease.name, func(t *testing.T) {
				t.Parallel()
				db := newDB(t, 2)
				db.store(t, nil) // the table
				cfg := db.pool.Config()
				cfg.MaxConns = 16
				cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = iso
				pool, err := pgxPool(cfg)
				require.NoError(t, err)
				t.Cleanup(pool.Close)
				s, err := pgstore.New(t.Context(), pool, &pgstore.Options{Table: db.table("dedup_records"), Timeout: 10 * time.Second})
				require.NoError(t, err)
				contend(t, s, 32, 10, lease.min, lease.max)
			})
		}
	}
}

// contend has workers each claim the key "hot" rounds times, with leases
// from minLease to maxLease. A worker that claims it releases it (every other
// time) or leaves its lease to end; one that finds it held goes on at
// once. Every answer must be a claim or a live claim of another.
func contend(t *testing.T, s *pgstore.Store, workers, rounds int, minLease, maxLease time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		errs   []error
		claims int
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}
	for w := range workers {
		wg.Go(func() {
			for n := range rounds {
				lease := minLease + time.Duration(w*7+n*13)%(maxLease-minLease+1)
				var (
					c   store.Claim
					err error
				)
				if w%4 == 0 {
					// A batch holding the key beside a key of its own.
					out := s.AcquireBatch(ctx, []store.AcquireRequest{
						{Key: "hot", Lease: lease, Fingerprint: "fp"},
						{Key: fmt.Sprintf("own:%d:%d", w, n), Lease: lease},
					})
					c, err = out[0].Claim, out[0].Err
					if err == nil && (out[1].Err != nil || !out[1].Claim.Acquired) {
						err = fmt.Errorf("the batch's own key: %+v", out[1])
					}
				} else {
					c, err = s.Acquire(ctx, store.AcquireRequest{Key: "hot", Lease: lease, Fingerprint: "fp"})
				}
				switch {
				case err != nil:
					fail(fmt.Errorf("worker %d round %d: %w", w, n, err))
					continue
				case c.Acquired:
					mu.Lock()
					claims++
					mu.Unlock()
					if n%4 != 3 {
						err := s.Release(ctx, store.ReleaseRequest{Key: "hot", Token: c.Token, Error: "x", Retention: time.Hour})
						if err != nil && !errors.Is(err, store.ErrLeaseLost) {
							fail(fmt.Errorf("worker %d round %d: release: %w", w, n, err))
						}
					}
				case c.Record.State != store.StateProcessing || c.Record.LeaseUntil.IsZero():
					fail(fmt.Errorf("worker %d round %d: refused by a record that holds nothing: %+v", w, n, c.Record))
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, ctx.Err(), "the workers took too long")
	if len(errs) > 0 {
		t.Fatalf("contention is not an outage: every claim must end as claimed, duplicate or in flight; %d failed, the first: %v", len(errs), errs[0])
	}
	require.Positive(t, claims)
}
