package perf

import (
	"strings"
	"testing"
)

func TestSplice(t *testing.T) {
	doc := "# T\n\ntext\n" + BeginMarker + " (generated) -->\nold\nlines\n" + EndMarker + "\nafter\n"
	got, err := Splice(doc, "new\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "# T\n\ntext\n" + BeginMarker + " (generated) -->\nnew\n" + EndMarker + "\nafter\n"
	if got != want {
		t.Errorf("Splice:\n%s\nwant:\n%s", got, want)
	}
	for _, bad := range []string{
		"no markers\n",
		"x\n" + BeginMarker + " -->\nno end\n",
		"x\n" + BeginMarker + " -->\n" + EndMarker + "\n" + BeginMarker + " -->\n" + EndMarker + "\n",
	} {
		if _, err := Splice(bad, "new\n"); err == nil {
			t.Errorf("Splice(%q) succeeded", bad)
		}
	}
}

// TestRender merges two runs of a row whose aim (JetStream's) is a ratio
// of at least 0.85: the median of the runs' ratios, each in brackets, and
// the ceiling.
func TestRender(t *testing.T) {
	const name = "JetStream consumer, memstore, trivial handler"
	run := func(ratio float64) Run {
		return Run{Date: "2026-11-29T14:00:00Z", Go: "go1.26", Procs: 2, Rounds: 2, Rows: []Row{{
			Name: name, Unit: "msgs/s", N: 1000,
			Lines: []Line{
				{Kind: Side, Name: "bare jetstream consumer", Values: []float64{1000, 1000}, Ratios: []float64{1, 1}},
				{Kind: Side, Name: "dedupnats Consumer, memstore", Values: []float64{1000 * ratio, 1000 * ratio}, Ratios: []float64{ratio, ratio}},
				{Kind: Ceiling, Name: "ceiling", Values: []float64{100, 100}, Ratios: []float64{0.9, 0.92}},
			},
		}}}
	}
	out := Render([]Run{run(0.80), run(0.90), run(0.86)})
	for _, want := range []string{
		"| dedupnats Consumer, memstore | 860 msgs/s | 0.86 (0.80, 0.90, 0.86) | 0.82-0.89; 0.80-0.90 |  | met |",
		"dedupnats Consumer: ratio >= 0.85 (ceiling 0.91)",
		"| ceiling | 100 ns/msg | 0.91 (0.91, 0.91, 0.91) |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Render lacks %q:\n%s", want, out)
		}
	}
	if out := Render([]Run{run(0.80)}); !strings.Contains(out, "| dedupnats Consumer, memstore | 800 msgs/s | 0.80 | 0.80-0.80; 0.80-0.80 |  | **missed** |") {
		t.Errorf("one run at 0.80 is not missed:\n%s", out)
	}
}
