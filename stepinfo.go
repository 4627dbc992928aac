package dedup

import (
	"fmt"

	"github.com/dedup-go/dedup/store"
)

// StepInfo is a step record as the receiver wrote it, read back for an
// operator's tools (dedupctl get): see ParseStep.
type StepInfo struct {
	// Name is the step's name; GivenUpStep for the record that says the
	// message was given up.
	Name string
	// State is "done", "done-result-not-stored", "compensated", or, for
	// the given-up record, "compensating" or "compensated-all".
	State string
	// Order is the order the step completed in, 1 for the first; 0 for
	// the given-up record.
	Order uint64
	// Result is the step's result, encoded with the receiver's Codec.
	Result []byte
	// Reason, Cause and FailedStep describe the given-up record: why the
	// message was given up, the error's text, and the step whose
	// compensation failed last (with Failures, how many times).
	Reason     string
	Cause      string
	FailedStep string
	Failures   uint64
}

// GivenUpStep is the name of the step record that says a message was
// given up: no step of the message starts once it exists.
const GivenUpStep = stepMarker

// ParseStep reads a step record that a receiver wrote. It fails for a
// record it cannot read (written by something else).
func ParseStep(rec store.StepRecord) (StepInfo, error) {
	e, ok := parseStep(rec.Value)
	if !ok {
		return StepInfo{}, fmt.Errorf("dedup: step record %q is not one a receiver wrote", rec.Name)
	}
	info := StepInfo{Name: rec.Name, Order: e.seq}
	switch e.kind {
	case stepDone:
		info.State, info.Result = "done", e.payload
	case stepNotStored:
		info.State = "done-result-not-stored"
	case stepCompensated:
		info.State, info.Result = "compensated", e.payload
	case markerGivingUp, markerGivenUp:
		g := markerState(e)
		info.State = "compensating"
		if e.kind == markerGivenUp {
			info.State = "compensated-all"
		}
		info.Reason, info.Cause, info.FailedStep, info.Failures = string(g.reason), g.cause, g.step, g.failures
	}
	return info, nil
}
