package idstrategy

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
)

// TooLongError is the error of a strategy whose id is valid UTF-8 but longer
// than its limit. It matches dedup.ErrInvalidKey and carries the id, so that
// HashLong and MaxLength, which see only the error, can still hash or accept
// it.
//
// A KeyFunc that transforms another strategy's id (prefixes it, joins it with
// others) must not pass the inner TooLongError through unchanged: HashLong
// would hash the inner id instead of the transformed one. Take ID from it,
// transform that, and return a TooLongError for the result.
type TooLongError struct {
	// ID is the whole id, over the limit.
	ID string
	// Limit is the limit it broke, in bytes.
	Limit int
}

// Error says how long the id is, not what it is: it may be a megabyte.
func (e *TooLongError) Error() string {
	return fmt.Sprintf("%v: the id is %d bytes, over the limit of %d (hash long ids with idstrategy.HashLong)",
		dedup.ErrInvalidKey, len(e.ID), e.Limit)
}

// Unwrap makes a TooLongError match dedup.ErrInvalidKey.
func (e *TooLongError) Unwrap() error { return dedup.ErrInvalidKey }

// strategyError names the strategy that failed in front of the reason, so that
// a dead-lettered message says which of several nested strategies gave up.
type strategyError struct {
	strategy string
	err      error
}

func (e *strategyError) Error() string { return "idstrategy: " + e.strategy + ": " + e.err.Error() }

func (e *strategyError) Unwrap() error { return e.err }

// reason is the error without the "idstrategy: " prefix, for nesting it in
// another strategy's message.
func reason(err error) string {
	if se, ok := err.(*strategyError); ok { // only the outermost error has the prefix
		return se.strategy + ": " + se.err.Error()
	}
	return err.Error()
}

// within puts err, returned by a strategy nested in outer, under outer's name.
// Errors that match neither sentinel come from the user's functions; they are
// made to match dedup.ErrInvalidKey, so every error of this package matches
// dedup.ErrNoKey or dedup.ErrInvalidKey and callers need only two cases.
func within(outer string, err error) error {
	if !errors.Is(err, dedup.ErrNoKey) && !errors.Is(err, dedup.ErrInvalidKey) {
		err = fmt.Errorf("%w: %w", dedup.ErrInvalidKey, err)
	}
	if se, ok := err.(*strategyError); ok { // only the outermost error has the prefix
		return &strategyError{strategy: outer + ": " + se.strategy, err: se.err}
	}
	return &strategyError{strategy: outer, err: err}
}

func noKey(strategy, detail string) error {
	return &strategyError{strategy: strategy, err: fmt.Errorf("%w: %s", dedup.ErrNoKey, detail)}
}

func invalidKey(strategy, detail string) error {
	return &strategyError{strategy: strategy, err: fmt.Errorf("%w: %s", dedup.ErrInvalidKey, detail)}
}

// check validates a finished id with adapter.ValidateID. An id that is too long
// but otherwise fine gets a TooLongError, so HashLong and MaxLength can use it.
func check(strategy, id string, limit int) error {
	err := adapter.ValidateID(id, limit)
	switch {
	case err == nil:
		return nil
	case len(id) > limit && utf8.ValidString(id):
		return &strategyError{strategy: strategy, err: &TooLongError{ID: id, Limit: limit}}
	case len(id) > limit:
		// ValidateID reports the length first, which would send the user to
		// HashLong; hashing would only hide that the producer sends garbage.
		return invalidKey(strategy, fmt.Sprintf("the id is not valid UTF-8 (and %d bytes long)", len(id)))
	}
	return &strategyError{strategy: strategy, err: err}
}

// recoverLong returns the id a strategy produced, also when it failed only
// for being too long: a wrapper that transforms the id must judge the length
// of its own result, not of its input.
func recoverLong(id string, err error) (string, error) {
	if err == nil {
		return id, nil
	}
	// errors.As moves its target to the heap: keep that off the happy path.
	return recoverLongError(id, err)
}

func recoverLongError(id string, err error) (string, error) {
	var long *TooLongError
	if errors.As(err, &long) {
		return long.ID, nil
	}
	return id, err
}

// misconfigured panics: a strategy is built once at start-up, and a broken one
// returning an error for every message would have every message dead-lettered
// (the Receiver treats key errors as poison), so failing loudly at
// construction loses nothing while an error later would.
// requireFuncs panics, through misconfigured, when fns is empty or holds a
// nil function; one and many name them ("part", "parts").
func requireFuncs[M any](constructor, one, many string, fns []dedup.KeyFunc[M]) {
	if len(fns) == 0 {
		misconfigured(constructor, "no %s", many)
	}
	for i, f := range fns {
		if f == nil {
			misconfigured(constructor, "%s %d of %d is nil", one, i+1, len(fns))
		}
	}
}

func misconfigured(constructor, format string, args ...any) {
	panic(fmt.Errorf("idstrategy: %s: %w: %s", constructor, dedup.ErrInvalidConfig, fmt.Sprintf(format, args...)))
}

// quote quotes external text for an error message, cut short so that a
// megabyte of garbage in a header does not end up in every log line.
func quote(s string) string {
	const maxQuoted = 64
	if len(s) <= maxQuoted {
		return fmt.Sprintf("%q", s)
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:cut], len(s))
}
