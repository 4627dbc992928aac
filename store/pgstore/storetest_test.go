package pgstore_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dedup-go/dedup/store/pgstore"
	"github.com/dedup-go/dedup/store/storetest"
)

// tick is the storetest time unit on the database's real clock: leases and
// retentions of 10 ticks.
const tick = 100 * time.Millisecond

// TestStoretest runs the conformance suite on one store in a schema of its
// own, on the database's clock, with every query exec mode the store
// supports: the default (prepared statements cached per connection), and
// the two that PgBouncer's transaction pooling needs.
func TestStoretest(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{0, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		name := "Default"
		if mode != 0 {
			name = mode.String()
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := newDB(t, 24)
			s := db.store(t, &pgstore.Options{QueryExecMode: mode})
			storetest.Run(t, func(t *testing.T) storetest.Harness {
				return storetest.Harness{
					Store:      s,
					Advance:    time.Sleep,
					Tick:       tick,
					Now:        func() time.Time { return dbNow(t, db.pool) },
					Resolution: time.Microsecond,
				}
			})
		})
	}
}
