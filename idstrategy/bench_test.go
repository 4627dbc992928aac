package idstrategy_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/idstrategy"
)

// benchBody is a typical event, about 300 bytes, with nesting and fields out
// of order.
var benchBody = []byte(`{
  "type": "order.placed",
  "order": {"id": "ord_8f14e45fceea167a", "total": 129.95, "currency": "EUR",
            "items": [{"sku": "A-1", "qty": 2, "price": 19.99}, {"sku": "B-7", "qty": 1, "price": 89.97}]},
  "customer": {"id": "cus_42", "email": "jane@example.com", "tags": ["vip", "eu"]},
  "occurred_at": "2024-05-01T12:00:00Z"
}`)

// The Receiver calls the strategy for every delivery, so the plain field
// strategy must stay free.
func TestFieldDoesNotAllocate(t *testing.T) {
	key := idstrategy.Field("ID", orderID)
	msg := order{ID: "order-8f14e45fceea167a"}
	require.Zero(t, testing.AllocsPerRun(100, func() { _, _ = key(msg) }))
}

// benchKey measures key on msg; bytes, when positive, is the body size for
// a throughput figure.
func benchKey(b *testing.B, key dedup.KeyFunc[order], msg order, bytes int) {
	if bytes > 0 {
		b.SetBytes(int64(bytes))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := key(msg); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkField(b *testing.B) {
	benchKey(b, idstrategy.Field("ID", orderID), order{ID: "order-8f14e45fceea167a"}, 0)
}

func BenchmarkComposite(b *testing.B) {
	key := idstrategy.Composite(
		idstrategy.Field("Tenant", orderTenant),
		idstrategy.Field("ID", orderID),
		idstrategy.Header("Type", orderHeader),
	)
	benchKey(b, key, order{Tenant: "tenant-7", ID: "order-8f14e45fceea167a", Headers: map[string]string{"Type": "order.placed"}}, 0)
}

func BenchmarkCompositeEscaped(b *testing.B) {
	key := idstrategy.Composite(idstrategy.Field("Tenant", orderTenant), idstrategy.Field("ID", orderID))
	benchKey(b, key, order{Tenant: `urn:tenant:7`, ID: `order\8f14e45fceea167a`}, 0)
}

func BenchmarkContentHash(b *testing.B) {
	benchKey(b, idstrategy.ContentHash(orderBody), order{Body: benchBody}, len(benchBody))
}

func BenchmarkCanonicalJSON(b *testing.B) {
	benchKey(b, idstrategy.CanonicalJSON(orderBody), order{Body: benchBody}, len(benchBody))
}
