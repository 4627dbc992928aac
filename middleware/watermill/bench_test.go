package dedupwatermill_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/require"
)

// BenchmarkDuplicate answers a duplicate in process, in the same run:
// Watermill's Deduplicator (its in-memory repository, keyed by UUID) and
// this middleware over memstore, both around a trivial handler that
// produces nothing, 256-byte payloads.
func BenchmarkDuplicate(b *testing.B) {
	payload := make([]byte, 256)
	handler := func(*message.Message) ([]*message.Message, error) { return nil, nil }
	msg := message.NewMessage("0f8fad5b-d9cb-469f-a165-70867728950e", payload)
	b.Run("watermill Deduplicator", func(b *testing.B) {
		repo, err := middleware.NewMapExpiringKeyRepository(time.Hour)
		require.NoError(b, err)
		d := &middleware.Deduplicator{Repository: repo, Timeout: time.Minute,
			KeyFactory: func(m *message.Message) (string, error) { return m.UUID, nil }}
		h := d.Middleware(handler)
		_, _ = h(msg)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := h(msg); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("dedupwatermill memstore", func(b *testing.B) {
		mw := newMiddleware(b, newMemstore(b), "bench", nil)
		h := mw.Middleware(handler)
		_, _ = h(msg)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := h(msg); err != nil {
				b.Fatal(err)
			}
		}
	})
}
