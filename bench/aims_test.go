package bench

import (
	"testing"

	"github.com/dedup-go/dedup/bench/internal/perf"
)

// TestAims needs no service: every row has an aim in perf.Aims, every aim
// names a row, and every goal can be checked.
func TestAims(t *testing.T) {
	names := map[string]bool{}
	for _, r := range rows {
		if names[r.name] {
			t.Errorf("two rows named %q", r.name)
		}
		names[r.name] = true
		if _, ok := perf.Aims[r.name]; !ok {
			t.Errorf("row %q has no aim in bench/internal/perf/aims.go", r.name)
		}
	}
	for name, aim := range perf.Aims {
		if !names[name] {
			t.Errorf("the aim of %q names no row", name)
		}
		if err := aim.Validate(); err != nil {
			t.Errorf("aim of %q: %v", name, err)
		}
	}
}
