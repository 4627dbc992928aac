package overredis_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dedup-go/dedup/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// epoch is where the tests' fake clocks start.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// acquire claims key through s for a minute, and fails t unless it did.
func acquire(t *testing.T, s store.Store, key, fingerprint string) store.Claim {
	t.Helper()
	c, err := s.Acquire(t.Context(), store.AcquireRequest{Key: key, Lease: time.Minute, Fingerprint: fingerprint})
	require.NoError(t, err)
	require.True(t, c.Acquired, "Acquire(%q) found a %s record", key, c.Record.State)
	return c
}

// complete completes key held by token through s, kept for an hour.
func complete(t *testing.T, s store.Store, key string, token store.Token, result string) {
	t.Helper()
	require.NoError(t, s.Complete(t.Context(), store.CompleteRequest{Key: key, Token: token, Result: []byte(result), Retention: time.Hour}))
}
