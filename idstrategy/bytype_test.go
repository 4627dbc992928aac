package idstrategy_test

import (
	"fmt"
	"testing"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/idstrategy"
)

func orderType(o order) (string, bool) {
	v, ok := o.Headers["Type"]
	return v, ok
}

func TestByType(t *testing.T) {
	t.Parallel()
	cases := map[string]dedup.KeyFunc[order]{
		"order.created": idstrategy.Field("ID", orderID),
		"tenant.moved":  idstrategy.Field("Tenant", orderTenant),
	}
	withFallback := idstrategy.ByType(orderType, cases, idstrategy.ContentHash(orderBody))
	without := idstrategy.ByType(orderType, cases, nil)
	typed := func(typ string) map[string]string { return map[string]string{"Type": typ} }
	tests := []keyCase[order]{
		{name: "first case", key: without, in: order{Headers: typed("order.created"), ID: "o", Tenant: "t"}, want: "o"},
		{name: "second case", key: without, in: order{Headers: typed("tenant.moved"), ID: "o", Tenant: "t"}, want: "t"},
		{name: "unknown type, fallback", key: withFallback, in: order{Headers: typed("other"), Body: []byte("hello")},
			want: "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"},
		{name: "no type, fallback", key: withFallback, in: order{Body: []byte("hello")},
			want: "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"},
		{name: "unknown type", key: without, in: order{Headers: typed("refund.issued")}, target: dedup.ErrNoKey,
			msg: `idstrategy: by type: dedup: message has no id: no strategy for type "refund.issued" and no fallback`},
		{name: "huge unknown type is cut in the message", key: without, in: order{Headers: typed(megabyte)}, target: dedup.ErrNoKey,
			msg: `(1048576 bytes) and no fallback`},
		{name: "no type", key: without, in: order{}, target: dedup.ErrNoKey, msg: "the message has no type name"},
		{name: "empty type", key: without, in: order{Headers: typed("")}, target: dedup.ErrNoKey, msg: "the message has no type name"},
		// The case is the rule for its type: its ErrNoKey is not a reason to
		// use the fallback.
		{name: "case without id does not fall back", key: withFallback, in: order{Headers: typed("order.created"), Body: []byte("b")},
			target: dedup.ErrNoKey, msg: `idstrategy: by type "order.created": field "ID": dedup: message has no id: the field is empty`},
		{name: "fallback without id", key: withFallback, in: order{},
			target: dedup.ErrNoKey, msg: "idstrategy: by type, fallback: content hash:"},
	}
	runKeyCases(t, nil, tests)
}

func TestByTypeCopiesTheMap(t *testing.T) {
	t.Parallel()
	cases := map[string]dedup.KeyFunc[order]{"a": idstrategy.Field("ID", orderID)}
	key := idstrategy.ByType(orderType, cases, nil)
	cases["a"] = idstrategy.Field("Tenant", orderTenant)
	delete(cases, "a")
	id, err := key(order{Headers: map[string]string{"Type": "a"}, ID: "id"})
	wantID(t, id, err, "id")
}

func TestByTypeChecksHandWrittenCases(t *testing.T) {
	t.Parallel()
	key := idstrategy.ByType(orderType, map[string]dedup.KeyFunc[order]{
		"empty": func(order) (string, error) { return "", nil },
		"long":  func(order) (string, error) { return megabyte, nil },
	}, nil)
	id, err := key(order{Headers: map[string]string{"Type": "empty"}})
	wantErr(t, id, err, dedup.ErrNoKey, `by type "empty"`, "empty id")
	id, err = key(order{Headers: map[string]string{"Type": "long"}})
	wantErr(t, id, err, dedup.ErrInvalidKey, `by type "long"`, "over the limit")
}

type created struct{ OrderID string }
type refunded struct{ RefundID string }
type shipped struct{ ShipmentID string }

func (s *shipped) IdempotencyKey() string { return "shipment-" + s.ShipmentID }

func TestByGoType(t *testing.T) {
	t.Parallel()
	key := idstrategy.ByGoType(
		idstrategy.Case(idstrategy.Field("OrderID", func(c created) string { return c.OrderID })),
		idstrategy.Case(idstrategy.Field("RefundID", func(r *refunded) string { return r.RefundID })),
		idstrategy.Case(idstrategy.Method[idstrategy.IdempotencyKeyer]()),
	)
	tests := []keyCase[any]{
		{name: "struct", in: created{OrderID: "o1"}, want: "o1"},
		{name: "pointer", in: &refunded{RefundID: "r1"}, want: "r1"},
		{name: "interface", in: &shipped{ShipmentID: "s1"}, want: "shipment-s1"},
		{name: "case without id", in: created{}, target: dedup.ErrNoKey,
			msg: `idstrategy: by Go type idstrategy_test.created: field "OrderID": dedup: message has no id: the field is empty`},
		{name: "value where a pointer is expected", in: refunded{RefundID: "r1"}, target: dedup.ErrNoKey,
			msg: "idstrategy: by Go type: dedup: message has no id: no case for type idstrategy_test.refunded"},
		{name: "unknown type", in: 42, target: dedup.ErrNoKey, msg: "no case for type int"},
		{name: "nil", in: nil, target: dedup.ErrNoKey, msg: "the message is nil"},
		{name: "nil pointer of an interface case", in: (*shipped)(nil), target: dedup.ErrNoKey, msg: "the message is nil"},
	}
	runKeyCases(t, key, tests)
}

func TestByGoTypeFallback(t *testing.T) {
	t.Parallel()
	key := idstrategy.ByGoType(
		idstrategy.Case(idstrategy.Field("OrderID", func(c created) string { return c.OrderID })),
		idstrategy.Case(func(v any) (string, error) { return fmt.Sprintf("other-%v", v), nil }),
	)
	id, err := key(created{OrderID: "o"})
	wantID(t, id, err, "o")
	id, err = key(7)
	wantID(t, id, err, "other-7")
	// Case[any] does not match a nil message: there is nothing to key.
	id, err = key(nil)
	wantErr(t, id, err, dedup.ErrNoKey, "the message is nil")
}

func TestByGoTypeCopiesItsCases(t *testing.T) {
	t.Parallel()
	cases := []idstrategy.TypeCase{idstrategy.Case(idstrategy.Field("OrderID", func(c created) string { return c.OrderID }))}
	key := idstrategy.ByGoType(cases...)
	cases[0] = idstrategy.Case(func(created) (string, error) { return "changed", nil })
	id, err := key(created{OrderID: "o"})
	wantID(t, id, err, "o")
}
