package cli

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/store"
)

// foreignNote is what get says of a step record a receiver did not write.
const foreignNote = "not written by a dedup receiver (or by a newer one): shown raw"

// step is a step record as get shows it: read back with dedup.ParseStep,
// or raw when the receiver did not write it.
type step struct {
	rec     store.StepRecord
	info    dedup.StepInfo
	foreign bool
}

// steps reads rec's step records back, in the order they completed, the
// given-up record after them, and the foreign ones last (by name).
func steps(recs []store.StepRecord) []step {
	out := make([]step, 0, len(recs))
	for _, r := range recs {
		info, err := dedup.ParseStep(r)
		out = append(out, step{rec: r, info: info, foreign: err != nil})
	}
	rank := func(s step) int {
		switch {
		case s.foreign:
			return 2
		case s.info.Name == dedup.GivenUpStep:
			return 1
		}
		return 0
	}
	slices.SortFunc(out, func(a, b step) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a.info.Order, b.info.Order), cmp.Compare(a.rec.Name, b.rec.Name))
	})
	return out
}

// jsonText reports whether b is a result get shows as text: valid UTF-8
// and JSON, as the receiver's default codec (and the middlewares') writes.
func jsonText(b []byte) bool { return utf8.Valid(b) && json.Valid(b) }

// stepLines writes a record's steps as lines of get's table: a "step"
// line naming each, and its fields under it, indented.
func stepLines(line func(field, value string), recs []store.StepRecord) {
	if len(recs) == 0 {
		return
	}
	line("steps", strconv.Itoa(len(recs)))
	for _, s := range steps(recs) {
		line("step", s.rec.Name)
		if s.foreign {
			line("  note", foreignNote)
			line("  raw", stepBytes(s.rec.Value, "raw"))
			continue
		}
		i := s.info
		line("  state", i.State)
		if i.Name == dedup.GivenUpStep {
			line("  reason", dash(i.Reason))
			line("  cause", dash(i.Cause))
			line("  failed step", dash(i.FailedStep))
			line("  failures", strconv.FormatUint(i.Failures, 10))
			continue
		}
		line("  order", strconv.FormatUint(i.Order, 10))
		switch {
		case i.State == "done-result-not-stored":
			line("  result", "- (the step's result could not be stored)")
		case len(i.Result) == 0:
			line("  result", "-")
		default:
			line("  result", stepBytes(i.Result, "result"))
		}
	}
}

// stepBytes shows a step's bytes in the table: as text when they are
// JSON, cut to resultPreview; else in base64 when short, or their length.
func stepBytes(b []byte, what string) string {
	switch {
	case jsonText(b) && len(b) <= resultPreview:
		return string(b)
	case jsonText(b):
		cut := b[:resultPreview]
		for !utf8.Valid(cut) {
			cut = cut[:len(cut)-1]
		}
		return string(cut) + "… (" + size(len(b)) + "; -o json has it whole)"
	case base64.StdEncoding.EncodedLen(len(b)) <= resultPreview:
		return "base64:" + base64.StdEncoding.EncodeToString(b) + " (" + size(len(b)) + ", not JSON)"
	}
	return fmt.Sprintf("%s, not JSON (-o json has the %s in base64)", size(len(b)), what)
}

// stepJSON is a step record as get's --output json writes it, in the
// record's "steps". The field names are part of the tool's interface:
// add fields, never rename one.
type stepJSON struct {
	Name string `json:"name"`
	// State is dedup.StepInfo's: done, done-result-not-stored,
	// compensated, or, for the given-up record (dedup/given-up),
	// compensating or compensated-all. Absent for a foreign record.
	State string `json:"state,omitempty"`
	// Order is the order the step completed in, 1 for the first; absent
	// for the given-up record.
	Order uint64 `json:"order,omitempty"`
	// ResultSize is the size of the step's result, in bytes.
	ResultSize int `json:"result_size,omitempty"`
	// Result is the result when it is JSON (valid UTF-8); ResultBase64
	// when it is not.
	Result       json.RawMessage `json:"result,omitempty"`
	ResultBase64 []byte          `json:"result_base64,omitempty"`
	// Reason, Cause, FailedStep and Failures describe the given-up
	// record: why the message was given up, the error's text, the step
	// whose compensation failed last, and how many times they failed.
	Reason     string `json:"reason,omitempty"`
	Cause      string `json:"cause,omitempty"`
	FailedStep string `json:"failed_step,omitempty"`
	Failures   uint64 `json:"failures,omitempty"`
	// RawBase64 and Note are a record a receiver did not write: its value
	// as stored (absent when empty), and a note saying so.
	RawBase64 []byte `json:"raw_base64,omitempty"`
	Note      string `json:"note,omitempty"`
}

// newStepsJSON returns the JSON objects of a record's steps, in the order
// of the table.
func newStepsJSON(recs []store.StepRecord) []stepJSON {
	if len(recs) == 0 {
		return nil
	}
	out := make([]stepJSON, 0, len(recs))
	for _, s := range steps(recs) {
		if s.foreign {
			out = append(out, stepJSON{Name: s.rec.Name, RawBase64: s.rec.Value, Note: foreignNote})
			continue
		}
		i := s.info
		v := stepJSON{Name: i.Name, State: i.State, Order: i.Order, ResultSize: len(i.Result),
			Reason: i.Reason, Cause: i.Cause, FailedStep: i.FailedStep, Failures: i.Failures}
		switch {
		case len(i.Result) == 0:
		case jsonText(i.Result):
			v.Result = i.Result
		default:
			v.ResultBase64 = i.Result
		}
		out = append(out, v)
	}
	return out
}
