package store

import "context"

// Completion is what a Complete that succeeded did to the record.
type Completion uint8

// The completions a CompleteReporter reports.
const (
	// CompletionUnknown: the call failed, or the store cannot tell (a
	// wrapper over a store that is not a CompleteReporter).
	CompletionUnknown Completion = iota
	// CompletionWrote: this call completed the processing record its token
	// held; the record keeps this call's result, and its expiry is this
	// call's retention from the store's clock during the call.
	CompletionWrote
	// CompletionUnchanged: the token had already completed the record (an
	// earlier or concurrent Complete with it, through any process); this
	// call changed nothing, and the record keeps the first result and
	// expiry.
	CompletionUnchanged
)

// String returns the completion's name.
func (c Completion) String() string {
	switch c {
	case CompletionWrote:
		return "wrote"
	case CompletionUnchanged:
		return "unchanged"
	default:
		return "unknown"
	}
}

// CompleteOutcome is the answer to one request of CompleteBatchReport.
type CompleteOutcome struct {
	// Completion is CompletionUnknown when Err is not nil.
	Completion Completion
	Err        error
}

// CompleteOutcomes pairs each completion with its error, index by index:
// the answer of a CompleteBatchReport that collected them apart.
func CompleteOutcomes(done []Completion, errs []error) []CompleteOutcome {
	out := make([]CompleteOutcome, len(done))
	for i := range out {
		out[i] = CompleteOutcome{Completion: done[i], Err: errs[i]}
	}
	return out
}

// CompleteReporter is an optional ability of stores whose Complete can
// tell, in the same atomic step and round trip, whether it wrote the
// record or found it completed already by the same token (redisstore,
// memstore, tieredstore over a store that reports). A cache in front of
// the store (tieredstore) keeps a copy only of a record it knows: the one
// its own call wrote.
//
// Each call is Complete (or CompleteBatch) with the same effect and error,
// and reports the Completion besides.
type CompleteReporter interface {
	// CompleteReport runs Complete and reports what it did to the record.
	// On error the Completion is CompletionUnknown.
	CompleteReport(ctx context.Context, req CompleteRequest) (Completion, error)
	// CompleteBatchReport runs CompleteBatch (Complete for every request,
	// in order, for a store that is not a BatchStore); the outcome at
	// index i belongs to reqs[i]. A key repeated in reqs with one token
	// is written by its first request that succeeds; the later ones report
	// CompletionUnchanged.
	CompleteBatchReport(ctx context.Context, reqs []CompleteRequest) []CompleteOutcome
}
