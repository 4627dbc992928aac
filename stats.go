package dedup

import "sync/atomic"

// Stats counts what a Receiver did since it was created.
type Stats struct {
	Processed  uint64 // handler ran and succeeded under a claim
	Duplicates uint64 // answered with a stored or shared result
	InFlight   uint64 // refused because another delivery held the key
	Bypassed   uint64 // handler ran unprotected: store down, fail-open
	// HandlerErrors counts handler errors and panics.
	HandlerErrors uint64
	// StoreErrors counts failed claims (the store was unavailable).
	StoreErrors uint64
	// ResultsNotStored counts successes whose result or completion could not
	// be stored: a redelivery of such a message may run the handler again.
	ResultsNotStored uint64
	// LeaseLost counts successes whose claim had been taken over.
	LeaseLost uint64
	// ResultsUndecodable counts duplicates whose stored result did not
	// decode (ErrResultUndecodable): they were acknowledged with the zero
	// value. Undecodable message bodies (ErrUndecodable) are the adapters'
	// to count.
	ResultsUndecodable uint64
}

type stats struct {
	processed, duplicates, inFlight, bypassed    atomic.Uint64
	handlerErrors, storeErrors, resultsNotStored atomic.Uint64
	leaseLost, resultsUndecodable                atomic.Uint64
}

// Stats returns the receiver's counters.
func (r *Receiver[M, R]) Stats() Stats {
	s := &r.stats
	return Stats{
		Processed:          s.processed.Load(),
		Duplicates:         s.duplicates.Load(),
		InFlight:           s.inFlight.Load(),
		Bypassed:           s.bypassed.Load(),
		HandlerErrors:      s.handlerErrors.Load(),
		StoreErrors:        s.storeErrors.Load(),
		ResultsNotStored:   s.resultsNotStored.Load(),
		LeaseLost:          s.leaseLost.Load(),
		ResultsUndecodable: s.resultsUndecodable.Load(),
	}
}
