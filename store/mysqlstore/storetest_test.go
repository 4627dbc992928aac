package mysqlstore_test

import (
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store/storetest"
)

// tick is the storetest time unit on the database's real clock: leases and
// retentions of 10 ticks.
const tick = 100 * time.Millisecond

// TestStoretest runs the conformance suite on one store in a database of
// its own, on the database's clock: with the driver's defaults (server-side
// prepared statements, times read as text) under REPEATABLE READ, InnoDB's
// default; and with the parameters applications often set
// (interpolateParams: statements sent as text; parseTime in another loc;
// clientFoundRows: rows matched counted, not rows changed) under READ
// COMMITTED.
func TestStoretest(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	for name, cfg := range map[string]struct {
		params map[string]string
		edit   func(*mysql.Config)
	}{
		"Default": {},
		"ReadCommittedInterpolated": {
			params: map[string]string{"tx_isolation": "'READ-COMMITTED'", "time_zone": "'+05:00'"},
			edit: func(c *mysql.Config) {
				c.InterpolateParams, c.ParseTime, c.Loc, c.ClientFoundRows = true, true, paris, true
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := newDB(t, 24)
			db := open(t, d.with(cfg.params, cfg.edit), 24)
			s := newStore(t, db, nil)
			storetest.Run(t, func(t *testing.T) storetest.Harness {
				return storetest.Harness{
					Store:      s,
					Advance:    time.Sleep,
					Tick:       tick,
					Now:        func() time.Time { return dbNow(t, d.db) },
					Resolution: time.Microsecond,
				}
			})
		})
	}
}
