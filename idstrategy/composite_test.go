package idstrategy_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/idstrategy"
)

// pair is a message of two raw parts, for the composite tests.
type pair struct{ a, b string }

func pairKey() dedup.KeyFunc[pair] {
	return idstrategy.Composite(
		func(p pair) (string, error) { return p.a, nil },
		func(p pair) (string, error) { return p.b, nil },
	)
}

func TestComposite(t *testing.T) {
	t.Parallel()
	key := pairKey()
	tests := []keyCase[pair]{
		{name: "readable", in: pair{"tenant-7", "order-42"}, want: "tenant-7:order-42"},
		{name: "colon in the first part", in: pair{"a:b", "c"}, want: `a\:b:c`},
		{name: "colon in the second part", in: pair{"a", "b:c"}, want: `a:b\:c`},
		{name: "backslashes", in: pair{`a\`, `b`}, want: `a\\:b`},
		{name: "escaped colon look-alike", in: pair{`a\:b`, `c`}, want: `a\\\:b:c`},
		{name: "unicode", in: pair{"ü", "ß"}, want: "ü:ß"},
		{name: "first empty", in: pair{"", "x"}, target: dedup.ErrNoKey,
			msg: "idstrategy: composite part 1 of 2: dedup: message has no id: the part is empty"},
		{name: "second empty", in: pair{"x", ""}, target: dedup.ErrNoKey, msg: "composite part 2 of 2"},
		{name: "invalid UTF-8", in: pair{"x", badUTF8}, target: dedup.ErrInvalidKey, msg: "part 2 of 2: dedup: invalid message id: the part is not valid UTF-8"},
		{name: "too long together", in: pair{exactLimit, "x"}, target: dedup.ErrInvalidKey, msg: "idstrategy: composite: dedup: invalid message id: the id is 514 bytes"},
		{name: "a megabyte", in: pair{megabyte, "x"}, target: dedup.ErrInvalidKey, msg: "over the limit"},
	}
	runKeyCases(t, key, tests)
}

func TestCompositeOfStrategies(t *testing.T) {
	t.Parallel()
	key := idstrategy.Composite(
		idstrategy.Field("Tenant", orderTenant),
		idstrategy.Field("ID", orderID),
		idstrategy.Header("Type", orderHeader),
	)
	id, err := key(order{Tenant: "t1", ID: "o:2", Headers: map[string]string{"Type": "created"}})
	wantID(t, id, err, `t1:o\:2:created`)

	id, err = key(order{Tenant: "t1", Headers: map[string]string{"Type": "created"}})
	wantErr(t, id, err, dedup.ErrNoKey,
		`idstrategy: composite part 2 of 3: field "ID": dedup: message has no id: the field is empty`)

	id, err = key(order{Tenant: "t1", ID: "o2"})
	wantErr(t, id, err, dedup.ErrNoKey, `composite part 3 of 3: header "Type"`, "missing")

	id, err = key(order{Tenant: badUTF8, ID: "o2", Headers: map[string]string{"Type": "x"}})
	wantErr(t, id, err, dedup.ErrInvalidKey, `composite part 1 of 3: field "Tenant"`)
}

func TestCompositePartErrors(t *testing.T) {
	t.Parallel()
	lookupErr := errors.New("lookup failed")
	key := idstrategy.Composite(
		func(p pair) (string, error) { return p.a, nil },
		func(pair) (string, error) { return "", lookupErr },
	)
	id, err := key(pair{"a", "b"})
	wantErr(t, id, err, dedup.ErrInvalidKey, "composite part 2 of 2", "lookup failed")
	require.ErrorIs(t, err, lookupErr)
}

func TestCompositeSinglePart(t *testing.T) {
	t.Parallel()
	key := idstrategy.Composite(idstrategy.Field("ID", orderID))
	id, err := key(order{ID: "a:b"})
	wantID(t, id, err, `a\:b`)
}

func TestCompositeCopiesItsParts(t *testing.T) {
	t.Parallel()
	parts := []dedup.KeyFunc[order]{idstrategy.Field("ID", orderID)}
	key := idstrategy.Composite(parts...)
	parts[0] = idstrategy.Field("Tenant", orderTenant)
	id, err := key(order{ID: "id", Tenant: "tenant"})
	wantID(t, id, err, "id")
}

func TestCompositeHashLongHashesTheWhole(t *testing.T) {
	t.Parallel()
	// A part over the limit must not make HashLong hash that part alone:
	// messages differing in the other part would share an id.
	key := idstrategy.HashLong(pairKey(), adapter.DefaultMaxIDLength)
	a, err := key(pair{megabyte, "x"})
	wantID(t, a, err, hashOf(megabyte+":x"))
	b, err := key(pair{megabyte, "y"})
	wantID(t, b, err, hashOf(megabyte+":y"))

	// And the same through a part that is itself a strategy rejecting it.
	key2 := idstrategy.HashLong(idstrategy.Composite(
		idstrategy.Field("ID", orderID),
		idstrategy.Field("Tenant", orderTenant),
	), adapter.DefaultMaxIDLength)
	id, err := key2(order{ID: megabyte, Tenant: "t"})
	wantID(t, id, err, hashOf(megabyte+":t"))
}

func TestCompositeNeverCollides(t *testing.T) {
	t.Parallel()
	// Part lists that a naive join would confuse.
	lists := [][]string{
		{"a:b", "c"}, {"a", "b:c"}, {"a:b:c"}, {"a", "b", "c"},
		{`a\`, "b"}, {`a\:b`}, {`a\`, `:b`}, {`a`, `\:b`}, {`a\\`, `b`}, {`a\\:b`},
		{"a", ":"}, {"a:", ""}, {":", ":"}, {"::"}, {`\`, `\`}, {`\\`},
	}
	key := func(parts []string) (string, error) {
		fs := make([]dedup.KeyFunc[struct{}], len(parts))
		for i, p := range parts {
			fs[i] = func(struct{}) (string, error) { return p, nil }
		}
		return idstrategy.Composite(fs...)(struct{}{})
	}
	seen := map[string][]string{}
	for _, parts := range lists {
		id, err := key(parts)
		if err != nil {
			continue // lists with an empty part
		}
		require.NotContains(t, seen, id, "%q and %q give the same id", seen[id], parts)
		seen[id] = parts
		require.Equal(t, parts, splitComposite(id), "id %q does not read back", id)
	}
}

// splitComposite reads the parts back from a composite id: the proof that
// the encoding loses nothing.
func splitComposite(id string) []string {
	var parts []string
	var cur strings.Builder
	for i := 0; i < len(id); i++ {
		switch id[i] {
		case '\\':
			i++
			cur.WriteByte(id[i])
		case ':':
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(id[i])
		}
	}
	return append(parts, cur.String())
}
