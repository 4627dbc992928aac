package store

import (
	"context"
	"time"
	"unicode/utf8"
)

// StepStore is an optional ability of stores that keep step records: the
// recorded outcomes of the named steps a handler runs under its claim
// (dedup.Step), kept with the key's record. A receiver whose handler uses
// steps requires it of its store at construction.
//
// Step records belong to the record of their key:
//   - a fresh record (an absent key claimed, or one whose completed or
//     failed record expired or was deleted) has none;
//   - they survive what keeps the record: a Release, a later Acquire that
//     takes the failed key over, a takeover after a lease ended, a lost
//     answer's Acquire granted again with its own token, and a Complete;
//   - they expire, are cleaned up and are deleted with the record (an
//     Inspector's Delete and DeleteIf take them too), and an Inspector's
//     Get and Scan return them in Record.Steps.
//
// Reading and writing them is fenced like Complete: only the token that
// holds the key while it is processing may, and any other call fails with
// ErrLeaseLost, changing nothing.
type StepStore interface {
	// LoadSteps returns the step records of req.Key, in no particular
	// order, when req.Token holds it. It fails with ErrLeaseLost when the
	// token does not hold the key (another token holds it, it completed or
	// was released, or it is absent).
	LoadSteps(ctx context.Context, req StepsRequest) ([]StepRecord, error)
	// SaveStep records req.Name with req.Value for req.Key, held by
	// req.Token, replacing a record of the same name. It fails with
	// ErrLeaseLost, recording nothing, when the token does not hold the
	// key. A name that is empty, longer than MaxStepNameLen or not valid
	// UTF-8 fails with ErrInvalidConfig.
	SaveStep(ctx context.Context, req SaveStepRequest) error
}

// StepsKept is implemented by a store that wraps another and has the
// StepStore methods whatever it wraps (tieredstore, deduptest's
// FaultStore): KeepsSteps reports whether it really keeps step records,
// that is whether the store it wraps does. A receiver that needs step
// records asks it after the type assertion, and refuses a store that says
// false at construction.
type StepsKept interface {
	KeepsSteps() bool
}

// KeepsSteps reports whether s keeps step records: it is a StepStore, and
// not a wrapper that says it keeps none (StepsKept).
func KeepsSteps(s Store) bool {
	if _, ok := s.(StepStore); !ok {
		return false
	}
	if k, ok := s.(StepsKept); ok {
		return k.KeepsSteps()
	}
	return true
}

// MaxStepNameLen is the longest step name a StepStore must keep, in
// bytes.
const MaxStepNameLen = 200

// StepRecord is one step's record: its name and the value the receiver
// keeps for it (its outcome and encoded result, in the receiver's own
// encoding). A store copies values in and out and never interprets them.
type StepRecord struct {
	Name  string
	Value []byte
}

// StepsRequest asks for the step records of Key, held by Token.
type StepsRequest struct {
	Key   string
	Token Token
}

// SaveStepRequest records one step of Key, held by Token.
type SaveStepRequest struct {
	Key   string
	Token Token
	// Name is the step's name: 1 to MaxStepNameLen bytes of valid UTF-8.
	Name string
	// Value is kept as it is; nil and empty are both kept as empty.
	Value []byte
	// Retention is how long the key's record is kept once it completes or
	// fails (the receiver's retention). A store that keeps step records
	// apart from the record may use it to make them live as long.
	Retention time.Duration
}

// StepsRolledBack tells the receiver that step records written under
// this claim may have been undone: the handler's transaction, which held
// them, rolled back (pgstore's and mysqlstore's TxHandler call it before
// they run the handler again). The receiver then forgets what it
// remembers of this run's steps and reads them from the store again.
func (h *HeldClaim) StepsRolledBack() { h.state.Add(heldRollback) }

// StepsGeneration counts the calls of StepsRolledBack.
func (h *HeldClaim) StepsGeneration() uint64 { return h.state.Load() / heldRollback }

// StepNameValid reports whether name is a step name every StepStore
// keeps: 1 to MaxStepNameLen bytes of valid UTF-8.
func StepNameValid(name string) bool {
	return name != "" && len(name) <= MaxStepNameLen && utf8.ValidString(name)
}
