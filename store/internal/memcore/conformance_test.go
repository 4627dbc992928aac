package memcore_test

import (
	"strconv"
	"testing"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/store/internal/memcore"
	"github.com/dedup-go/dedup/store/storetest"
)

// TestConformance runs the suite on the core itself, as tieredstore embeds
// it, not only through memstore: cut into shards (the default capacity)
// and in one piece (a small one).
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, capacity := range []int{memcore.DefaultCapacity, 1000} {
		t.Run("capacity="+strconv.Itoa(capacity), func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, func(t *testing.T) storetest.Harness {
				clk := clock.NewFake(epoch)
				s, err := memcore.New(&memcore.Options{Capacity: capacity, Clock: clk})
				if err != nil {
					t.Fatal(err)
				}
				return storetest.Harness{Store: s, Advance: clk.Advance, Now: clk.Now}
			})
		})
	}
}
