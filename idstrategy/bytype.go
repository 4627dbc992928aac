package idstrategy

import (
	"fmt"
	"maps"
	"reflect"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
)

// ByType picks the strategy by the message's type name, for a topic that
// carries several kinds of message identified by a header or envelope field
// ("order.created" keyed by order id, "refund.issued" by refund id). typeOf
// returns the name and whether there is one; an empty name counts as none.
//
// A message with no type name or a name not in cases uses fallback; with a nil
// fallback it fails with dedup.ErrNoKey naming the type. The chosen strategy's
// own dedup.ErrNoKey is returned as it is, without trying fallback: the case
// is the rule for that type; combine it with FirstOf to have a second choice.
//
// cases is copied, so changing the map afterwards has no effect. It panics if
// typeOf or a case is nil.
func ByType[M any](typeOf func(M) (string, bool), cases map[string]dedup.KeyFunc[M], fallback dedup.KeyFunc[M]) dedup.KeyFunc[M] {
	if typeOf == nil {
		misconfigured("ByType", "typeOf is nil")
	}
	for name, k := range cases {
		if k == nil {
			misconfigured("ByType", "the case for %q is nil", name)
		}
	}
	cases = maps.Clone(cases)
	return func(m M) (string, error) {
		name, ok := typeOf(m)
		ok = ok && name != ""
		if k, found := cases[name]; ok && found {
			return run(k, m, "by type "+quote(name))
		}
		switch {
		case fallback != nil:
			return run(fallback, m, "by type, fallback")
		case !ok:
			return "", noKey("by type", "the message has no type name and there is no fallback")
		}
		return "", noKey("by type", fmt.Sprintf("no strategy for type %s and no fallback", quote(name)))
	}
}

// TypeCase is one case of ByGoType. Make it with Case.
type TypeCase struct {
	typ reflect.Type
	key func(v any) (id string, matched bool, err error)
}

// Case is the case of ByGoType for messages of Go type T, keyed by k. T may be
// an interface, which matches every message implementing it, and Case[any]
// matches every message, which makes it a fallback when put last.
//
// It panics if k is nil.
func Case[T any](k dedup.KeyFunc[T]) TypeCase {
	typ := reflect.TypeFor[T]()
	if k == nil {
		misconfigured("Case", "the KeyFunc for %v is nil", typ)
	}
	strategy := "by Go type " + typ.String()
	return TypeCase{
		typ: typ,
		key: func(v any) (string, bool, error) {
			t, ok := v.(T)
			if !ok {
				return "", false, nil
			}
			id, err := run(k, t, strategy)
			return id, true, err
		},
	}
}

// ByGoType picks the strategy by the message's Go type, for receivers of
// M = any fed by a decoder that returns different structs. The cases are tried
// in order and the first whose type the message has (by type assertion) wins,
// so put interface cases after the concrete types they would shadow. A message
// matching no case, or a nil message, fails with dedup.ErrNoKey naming its
// type; end with Case[any] to have a fallback instead.
//
// It panics if there are no cases, one is the zero TypeCase, or one can never
// match because an earlier case takes all its messages (the same type, or an
// interface it implements): such a case is a mistake in the order.
func ByGoType(cases ...TypeCase) dedup.KeyFunc[any] {
	if len(cases) == 0 {
		misconfigured("ByGoType", "no cases")
	}
	for j, c := range cases {
		if c.key == nil {
			misconfigured("ByGoType", "case %d of %d is the zero TypeCase; make cases with Case", j+1, len(cases))
		}
		for i, earlier := range cases[:j] {
			if c.typ == earlier.typ || (earlier.typ.Kind() == reflect.Interface && c.typ.Implements(earlier.typ)) {
				misconfigured("ByGoType", "case %d (%v) never matches: case %d (%v) takes its messages first", j+1, c.typ, i+1, earlier.typ)
			}
		}
	}
	cases = append([]TypeCase(nil), cases...) // the caller may reuse its slice
	return func(v any) (string, error) {
		for _, c := range cases {
			if id, ok, err := c.key(v); ok {
				return id, err
			}
		}
		if v == nil {
			return "", noKey("by Go type", "the message is nil")
		}
		return "", noKey("by Go type", fmt.Sprintf("no case for type %T", v))
	}
}

// run calls a chosen strategy and holds its result to the package's rules, as
// a hand-written strategy may return "" or an unchecked id without an error.
func run[M any](k dedup.KeyFunc[M], m M, strategy string) (string, error) {
	id, err := k(m)
	if err != nil {
		return "", within(strategy, err)
	}
	if id == "" {
		return "", noKey(strategy, "the strategy returned an empty id")
	}
	if err := check(strategy, id, adapter.DefaultMaxIDLength); err != nil {
		return "", err
	}
	return id, nil
}
