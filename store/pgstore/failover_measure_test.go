package pgstore_test

import (
	"os"
	"testing"
	"time"
)

// TestFailoverMeasure runs, when DEDUP_FAILOVER_MEASURE=1, the failovers
// that can double an effect (docs/reliability.md, "PostgreSQL failover"),
// and logs what each run saw:
//
//   - async: the standby is asynchronous, with the default lease; the
//     primary's process dies on a live host, so what it wrote to the
//     standby's connection is still delivered;
//   - async-host-dies: the same 2ms away (another zone); the primary
//     loses its standby, serves its clients for 200ms more, then its host
//     dies. It acknowledged commits that the standby never received, and
//     the promoted standby has forgotten them;
//   - sync-host-dies: the same, with a synchronous standby (the CI test);
//   - lease-2s: the standby is synchronous, but the HA manager promotes it
//     3s after the kill while the lease is 2s: completions give up when
//     the lease ends before the new primary is reachable.
//
// Whether a run doubles depends on timing, so it asserts only what holds
// whatever the standby: no message is lost and every copy settles.
//
//	DEDUP_FAILOVER_MEASURE=1 go test -run TestFailoverMeasure -count 5 -v ./store/pgstore
func TestFailoverMeasure(t *testing.T) {
	if testing.Short() {
		t.Skip("a slow fault test (a server or process killed or restarted): skipped under -short")
	}
	if os.Getenv("DEDUP_FAILOVER_MEASURE") != "1" {
		t.Skip("a measurement: set DEDUP_FAILOVER_MEASURE=1 to run it")
	}
	for name, c := range map[string]failoverCase{
		"async":           {mode: asynchronous},
		"async-host-dies": {mode: asynchronous, rtt: 2 * time.Millisecond, hostDies: true, isolated: 200 * time.Millisecond},
		"sync-host-dies":  {mode: synchronous, rtt: 2 * time.Millisecond, hostDies: true, isolated: 200 * time.Millisecond},
		"lease-2s":        {mode: synchronous, lease: 2 * time.Second, detect: 3 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			run := runFailover(t, c)
			t.Log(run)
			for _, w := range run.wrong {
				t.Log(w)
			}
			for _, d := range run.doubles {
				t.Log(d)
			}
			if len(run.lost) > 0 {
				t.Errorf("%d messages lost: %v", len(run.lost), run.lost)
			}
			if run.unsettled > 0 {
				t.Errorf("%d copies never settled", run.unsettled)
			}
		})
	}
}
