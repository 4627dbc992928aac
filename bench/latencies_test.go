package bench

import (
	"math"
	"slices"
	"testing"
	"time"
)

// latencies are durations measured one by one, kept whole for their
// quantiles (a run of the SQL harnesses keeps a few million: tens of
// megabytes).
type latencies []time.Duration

// quantile is the q-quantile of l by the nearest rank, 0 when l is
// empty. It sorts a copy.
func (l latencies) quantile(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	rank := max(int(math.Ceil(q*float64(len(s)))), 1)
	return s[min(rank, len(s))-1]
}

// TestLatenciesQuantile checks the nearest rank at the ends and between.
func TestLatenciesQuantile(t *testing.T) {
	if got := (latencies{}).quantile(0.99); got != 0 {
		t.Fatalf("an empty set's quantile is %v", got)
	}
	var l latencies
	for us := 100; us >= 1; us-- { // unsorted
		l = append(l, time.Duration(us)*time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0, time.Microsecond}, {0.01, time.Microsecond}, {0.5, 50 * time.Microsecond}, {0.99, 99 * time.Microsecond}, {1, 100 * time.Microsecond}} {
		if got := l.quantile(c.q); got != c.want {
			t.Errorf("quantile %v: %v, want %v", c.q, got, c.want)
		}
	}
	if l[0] != 100*time.Microsecond {
		t.Error("quantile sorted the caller's slice")
	}
}
