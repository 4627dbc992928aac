package memcore_test

import (
	"testing"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/store/internal/memcore"
	"github.com/dedup-go/dedup/store/storetest"
)

// TestConformance runs the suite on the core itself, as tieredstore embeds
// it, not only through memstore.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		clk := clock.NewFake(epoch)
		s, err := memcore.New(&memcore.Options{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		return storetest.Harness{Store: s, Advance: clk.Advance, Now: clk.Now}
	})
}
