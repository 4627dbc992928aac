package idstrategy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
)

// FirstOf tries strategies in order and uses the first id found, for traffic
// where some producers send an id and others do not: a header, else the
// message's own key, else a content hash.
//
// Only dedup.ErrNoKey moves on to the next strategy. Any other error, notably
// dedup.ErrInvalidKey, is returned at once: an id that is present but broken
// (too long, not UTF-8) says the producer meant to identify the message, and
// falling back to, say, a content hash would silently dedup it by something
// else, so a retried message with a fixed id and its first broken delivery
// would not be recognised as one. Wrap the strategy in HashLong if long ids
// should be hashed rather than rejected. An inner strategy that returns ""
// without an error counts as having found nothing.
//
// When every strategy finds nothing, the error matches dedup.ErrNoKey and
// lists what each one tried.
//
// It panics if there are no strategies or one of them is nil.
func FirstOf[M any](strategies ...dedup.KeyFunc[M]) dedup.KeyFunc[M] {
	requireFuncs("FirstOf", "strategy", "strategies", strategies)
	strategies = append([]dedup.KeyFunc[M](nil), strategies...) // the caller may reuse its slice
	const strategy = "first of"
	return func(m M) (string, error) {
		var misses [4]error
		tried := misses[:0]
		for i, s := range strategies {
			id, err := s(m)
			if err == nil && id == "" {
				err = fmt.Errorf("%w: strategy %d returned an empty id", dedup.ErrNoKey, i+1)
			}
			if errors.Is(err, dedup.ErrNoKey) {
				tried = append(tried, err)
				continue
			}
			if err != nil {
				return "", within(fmt.Sprintf("first of, strategy %d of %d", i+1, len(strategies)), err)
			}
			if err := check(strategy, id, adapter.DefaultMaxIDLength); err != nil {
				return "", err
			}
			return id, nil
		}
		var b strings.Builder
		for i, err := range tried {
			if i > 0 {
				b.WriteString("; ")
			}
			b.WriteString(strings.Replace(reason(err), dedup.ErrNoKey.Error()+": ", "", 1))
		}
		return "", noKey(strategy, fmt.Sprintf("none of %d strategies found one: %s", len(strategies), b.String()))
	}
}
