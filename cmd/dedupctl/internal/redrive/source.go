package redrive

import (
	"context"
	"errors"
)

// Source is a dead-letter destination read in one pass.
type Source interface {
	// Next returns the next letter of the pass, or an error matching
	// ErrEnd when the pass is over: every letter there was when it began,
	// and none twice.
	Next(ctx context.Context) (*Letter, error)
	// Republish publishes the letter's original (body and headers, without
	// the Dedup-* ones) to its destination, and returns once the broker
	// confirmed it. An error matching ErrRefused is this letter's own (the
	// destination refused it or does not exist); an error matching
	// ErrDuplicateWindow says the broker dropped the copy as a duplicate of
	// the original; any other error ends the run.
	Republish(ctx context.Context, l *Letter) error
	// Remove removes the letter from the dead-letter destination.
	Remove(ctx context.Context, l *Letter) error
	// Leave leaves the letter in place: a later run reads it again.
	Leave(ctx context.Context, l *Letter) error
	// Size is how many letters the pass may read at most, -1 when unknown.
	Size() int64
	// Close ends the pass and releases the connections; letters read and
	// not removed stay in place.
	Close(ctx context.Context) error
}

var (
	// ErrEnd: the pass read every letter.
	ErrEnd = errors.New("redrive: end of the dead letters")
	// ErrRefused: the destination refused a copy, or does not exist.
	ErrRefused = errors.New("redrive: the destination refused the copy")
	// ErrDuplicateWindow: the destination dropped the copy as a duplicate
	// of the original, which it still remembers.
	ErrDuplicateWindow = errors.New("redrive: the copy was dropped as a duplicate of the original")
	// ErrNotFound: the dead-letter destination does not exist.
	ErrNotFound = errors.New("redrive: dead-letter destination not found")
)
