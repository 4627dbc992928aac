package idstrategy_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/idstrategy"
)

// Configuration errors panic at construction, never per message: see doc.go.
func TestConstructorsPanicOnBadConfig(t *testing.T) {
	t.Parallel()
	field := idstrategy.Field("ID", orderID)
	tests := []struct {
		name  string
		msg   string
		build func()
	}{
		{"Field nil get", `idstrategy: Field: dedup: invalid config: get is nil (field "ID")`, func() { idstrategy.Field[order]("ID", nil) }},
		{"Header nil get", `Header: dedup: invalid config: get is nil (header "X")`, func() { idstrategy.Header[order]("X", nil) }},
		{"BodyField nil get", `idstrategy: BodyField: dedup: invalid config: get is nil (field "OrderID")`, func() {
			idstrategy.BodyField[placed]("OrderID", nil)
		}},
		{"ContentHash nil body", "ContentHash: dedup: invalid config: body is nil", func() { idstrategy.ContentHash[order](nil) }},
		{"CanonicalJSON nil body", "CanonicalJSON: dedup: invalid config: body is nil", func() { idstrategy.CanonicalJSON[order](nil) }},
		{"Composite no parts", "Composite: dedup: invalid config: no parts", func() { idstrategy.Composite[order]() }},
		{"Composite nil part", "part 2 of 2 is nil", func() { idstrategy.Composite(field, nil) }},
		{"Windowed zero window", "window is 0s; it must be positive", func() { idstrategy.Windowed(field, 0, orderAt) }},
		{"Windowed negative window", "window is -1h0m0s", func() { idstrategy.Windowed(field, -time.Hour, orderAt) }},
		{"Windowed nil inner", "inner is nil", func() { idstrategy.Windowed(nil, time.Hour, orderAt) }},
		{"Windowed nil at", "at is nil", func() { idstrategy.Windowed(field, time.Hour, nil) }},
		{"FirstOf none", "FirstOf: dedup: invalid config: no strategies", func() { idstrategy.FirstOf[order]() }},
		{"FirstOf nil", "strategy 1 of 2 is nil", func() { idstrategy.FirstOf(nil, field) }},
		{"ByType nil typeOf", "typeOf is nil", func() { idstrategy.ByType(nil, nil, field) }},
		{"ByType nil case", `the case for "a" is nil`, func() {
			idstrategy.ByType(orderType, map[string]dedup.KeyFunc[order]{"a": nil}, nil)
		}},
		{"Case nil", "the KeyFunc for idstrategy_test.order is nil", func() { idstrategy.Case[order](nil) }},
		{"ByGoType none", "no cases", func() { idstrategy.ByGoType() }},
		{"ByGoType zero case", "case 1 of 1 is the zero TypeCase", func() { idstrategy.ByGoType(idstrategy.TypeCase{}) }},
		{"ByGoType same type twice", "case 2 (idstrategy_test.order) never matches: case 1 (idstrategy_test.order)", func() {
			idstrategy.ByGoType(idstrategy.Case(field), idstrategy.Case(field))
		}},
		{"ByGoType shadowed by an interface", "case 2 (*idstrategy_test.shipped) never matches: case 1 (idstrategy.IdempotencyKeyer)", func() {
			idstrategy.ByGoType(
				idstrategy.Case(idstrategy.Method[idstrategy.IdempotencyKeyer]()),
				idstrategy.Case(idstrategy.Method[*shipped]()),
			)
		}},
		{"ByGoType shadowed by any", "case 2 (idstrategy_test.order) never matches: case 1 (interface {})", func() {
			idstrategy.ByGoType(idstrategy.Case(func(any) (string, error) { return "x", nil }), idstrategy.Case(field))
		}},
		{"HashLong nil inner", "inner is nil", func() { idstrategy.HashLong[order](nil, 100) }},
		{"HashLong limit below a hash", "limit is 70; it must be at least 71", func() { idstrategy.HashLong(field, 70) }},
		{"MaxLength nil inner", "inner is nil", func() { idstrategy.MaxLength[order](nil, 100) }},
		{"MaxLength zero", "limit is 0; it must be positive", func() { idstrategy.MaxLength(field, 0) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			wantPanic(t, tt.msg, tt.build)
		})
	}
}

// A shadowing check that is wrong the other way would reject valid orders.
func TestByGoTypeAcceptsSpecificBeforeGeneral(t *testing.T) {
	t.Parallel()
	idstrategy.ByGoType(
		idstrategy.Case(idstrategy.Method[*shipped]()),
		idstrategy.Case(idstrategy.Method[idstrategy.IdempotencyKeyer]()),
		idstrategy.Case(func(any) (string, error) { return "x", nil }),
	)
}

// Strategies are shared by the Receiver's goroutines; -race checks the pool
// of CanonicalJSON and the captured state of the others.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	key := idstrategy.FirstOf(
		idstrategy.Header("Message-Id", orderHeader),
		idstrategy.Composite(idstrategy.Field("Tenant", orderTenant), idstrategy.Field("ID", orderID)),
		idstrategy.CanonicalJSON(orderBody),
	)
	want, err := key(order{Body: []byte(`{"b":[1,{"y":2,"x":1}],"a":"s"}`)})
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				body := `{"a":"s","b":[1,{"x":1,"y":2}]}`
				if (g+i)%2 == 0 {
					body = `{"b":[1,{"y":2,"x":1}],"a":"s"}`
				}
				got, err := key(order{Body: []byte(body)})
				if err != nil || got != want {
					errs <- got
					return
				}
				if _, err := key(order{Tenant: "t", ID: "o"}); err != nil {
					errs <- err.Error()
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatalf("concurrent call gave %q", e)
	}
}
