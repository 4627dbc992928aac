package store_test

import (
	"sync"
	"testing"

	"github.com/dedup-go/dedup/store"
)

// TestHeldClaimMarks checks that the completed mark and the count of
// rollbacks, which share one word, never disturb each other, also when
// they are set from several goroutines at once.
func TestHeldClaimMarks(t *testing.T) {
	var h store.HeldClaim
	for range 3 {
		h.StepsRolledBack()
	}
	if h.Completed() || h.StepsGeneration() != 3 {
		t.Fatalf("after 3 rollbacks: completed %v, generation %d; want false, 3", h.Completed(), h.StepsGeneration())
	}
	h.MarkCompleted()
	h.MarkCompleted()
	if !h.Completed() || h.StepsGeneration() != 3 {
		t.Fatalf("after MarkCompleted twice: completed %v, generation %d; want true, 3", h.Completed(), h.StepsGeneration())
	}

	var c store.HeldClaim
	const goroutines, each = 8, 1000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				c.StepsRolledBack()
				if g == 0 && i == each/2 {
					c.MarkCompleted()
				}
			}
		})
	}
	wg.Wait()
	if !c.Completed() || c.StepsGeneration() != goroutines*each {
		t.Fatalf("concurrently: completed %v, generation %d; want true, %d", c.Completed(), c.StepsGeneration(), goroutines*each)
	}
}
