package dedup

import (
	"sync/atomic"

	"github.com/dedup-go/dedup/delivery"
)

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
	// DeadLetters counts, by reason, the dead letters adapters reported
	// settled (Delivery.Settled): poison the broker took. Nil when there
	// were none.
	DeadLetters map[delivery.Reason]uint64
	// StepsRun counts the steps (Step) whose function ran and was
	// recorded; StepsReplayed those answered from an earlier run's record.
	StepsRun, StepsReplayed uint64
	// Compensations counts the compensations that ran and were recorded;
	// CompensationErrors those that failed (the message is retried).
	Compensations, CompensationErrors uint64
}

// deadLetterReasons are the reasons Decide dead-letters for, in the order
// of stats.deadLetters.
var deadLetterReasons = [...]delivery.Reason{delivery.ReasonNoKey, delivery.ReasonInvalidKey, delivery.ReasonUndecodable, delivery.ReasonKeyReused, delivery.ReasonAttemptsExhausted, delivery.ReasonPermanent, delivery.ReasonCompensationFailed}

type stats struct {
	deadLetters                                  [len(deadLetterReasons) + 1]atomic.Uint64 // the last: any other reason
	processed, duplicates, inFlight, bypassed    atomic.Uint64
	handlerErrors, storeErrors, resultsNotStored atomic.Uint64
	leaseLost, resultsUndecodable                atomic.Uint64
	stepsRun, stepsReplayed                      atomic.Uint64
	compensations, compensationErrors            atomic.Uint64
}

// deadLettered counts a dead letter for reason.
func (s *stats) deadLettered(reason delivery.Reason) {
	for i, r := range deadLetterReasons {
		if r == reason {
			s.deadLetters[i].Add(1)
			return
		}
	}
	s.deadLetters[len(deadLetterReasons)].Add(1)
}

// Stats returns the receiver's counters.
func (r *Receiver[M, R]) Stats() Stats {
	s := &r.stats
	var dead map[delivery.Reason]uint64
	for i := range s.deadLetters {
		n := s.deadLetters[i].Load()
		if n == 0 {
			continue
		}
		if dead == nil {
			dead = make(map[delivery.Reason]uint64)
		}
		reason := delivery.Reason("other")
		if i < len(deadLetterReasons) {
			reason = deadLetterReasons[i]
		}
		dead[reason] += n
	}
	return Stats{
		DeadLetters:        dead,
		Processed:          s.processed.Load(),
		Duplicates:         s.duplicates.Load(),
		InFlight:           s.inFlight.Load(),
		Bypassed:           s.bypassed.Load(),
		HandlerErrors:      s.handlerErrors.Load(),
		StoreErrors:        s.storeErrors.Load(),
		ResultsNotStored:   s.resultsNotStored.Load(),
		LeaseLost:          s.leaseLost.Load(),
		ResultsUndecodable: s.resultsUndecodable.Load(),
		StepsRun:           s.stepsRun.Load(),
		StepsReplayed:      s.stepsReplayed.Load(),
		Compensations:      s.compensations.Load(),
		CompensationErrors: s.compensationErrors.Load(),
	}
}
