// Package perf is what BenchmarkTable and the perftable command share: the
// rows' aims (Aims, the one place they are written), the run file a table
// run writes (Run, as JSON), and the markdown table of one run or of
// several merged (Render), which docs/performance.md holds between the
// markers BeginMarker and EndMarker.
package perf

import (
	"encoding/json"
	"fmt"
	"os"
)

// A Run is one run of BenchmarkTable: every round's figures of every row
// it ran, and nothing derived from the aims, so that a run file is judged
// by the aims of today.
type Run struct {
	// Date is when the run ended (UTC, RFC 3339).
	Date   string `json:"date"`
	Go     string `json:"go"`
	Procs  int    `json:"gomaxprocs"`
	Rounds int    `json:"rounds"`
	// Filter is BENCH_ROWS, empty for every row.
	Filter string `json:"filter,omitempty"`
	Rows   []Row  `json:"rows"`
}

// A Row is one row's rounds.
type Row struct {
	Name string `json:"name"`
	Unit string `json:"unit"`
	N    int    `json:"n"`
	// Chunk, when set, is how many operations a side ran before the next
	// side took its turn, within a round.
	Chunk  int    `json:"chunk,omitempty"`
	Allocs bool   `json:"allocs,omitempty"`
	CPU    bool   `json:"cpu,omitempty"`
	Lines  []Line `json:"lines"`
}

// Kind is what a line of a row is.
type Kind string

const (
	// Side is a side of the row; the first is its baseline.
	Side Kind = "side"
	// Versus is a line "A over B": ratios only.
	Versus Kind = "versus"
	// Ceiling is the ceiling memstore's own work implies: Values are
	// memstore's Acquire + Complete in ns per message, Ratios the ceiling
	// (bare / (bare + store)) of each round.
	Ceiling Kind = "ceiling"
)

// A Line is one line of a row, one value per round in each slice it has.
type Line struct {
	Kind Kind   `json:"kind"`
	Name string `json:"name"`
	// Values in the row's unit (ns per message for a Ceiling line).
	Values []float64 `json:"values,omitempty"`
	// Ratios to the baseline's value of the same round (Side), of A to B
	// (Versus), or the ceiling (Ceiling).
	Ratios []float64 `json:"ratios,omitempty"`
	Allocs []float64 `json:"allocs,omitempty"`
	// CPU is the process's CPU time per operation in ns, and CPURatios its
	// ratios like Ratios (rows with CPU set).
	CPU       []float64 `json:"cpu,omitempty"`
	CPURatios []float64 `json:"cpu_ratios,omitempty"`
}

// ReadRuns reads run files.
func ReadRuns(paths ...string) ([]Run, error) {
	runs := make([]Run, 0, len(paths))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var r Run
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if len(r.Rows) == 0 {
			return nil, fmt.Errorf("%s: no rows", p)
		}
		runs = append(runs, r)
	}
	return runs, nil
}

// Marshal is the run file's content.
func (r Run) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
