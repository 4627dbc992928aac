package idstrategy_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dedup-go/dedup"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// order is the message type of most tests.
type order struct {
	ID      string
	Tenant  string
	Headers map[string]string
	Body    []byte
	At      time.Time
}

func orderID(o order) string            { return o.ID }
func orderTenant(o order) string        { return o.Tenant }
func orderBody(o order) ([]byte, error) { return o.Body, nil }
func orderAt(o order) time.Time         { return o.At }

func orderHeader(o order, name string) (string, bool) {
	v, ok := o.Headers[name]
	return v, ok
}

// wantID fails the test unless err is nil and id is want and valid.
func wantID(t *testing.T, id string, err error, want string) {
	t.Helper()
	require.NoError(t, err)
	require.Equal(t, want, id)
	require.NoError(t, dedup.ValidateID(id, 0), "the returned id must pass ValidateID")
}

// wantErr fails the test unless err matches target (through the wrapping),
// its message contains every one of parts, and no id came back.
func wantErr(t *testing.T, id string, err error, target error, parts ...string) {
	t.Helper()
	require.ErrorIs(t, err, target, "id %q", short(id))
	require.Empty(t, id, "an id with the error")
	for _, p := range parts {
		require.ErrorContains(t, err, p)
	}
	// Every error of the package matches exactly one of the two sentinels, so
	// the Receiver can tell "nothing there" from "unusable".
	require.NotEqual(t, errors.Is(err, dedup.ErrNoKey), errors.Is(err, dedup.ErrInvalidKey),
		"error %q should match exactly one of ErrNoKey and ErrInvalidKey", err)
}

// wantPanic fails the test unless f panics with an error matching
// dedup.ErrInvalidConfig and containing msg.
func wantPanic(t *testing.T, msg string, f func()) {
	t.Helper()
	defer func() {
		err, ok := recover().(error)
		require.True(t, ok, "want a panic with an error")
		require.ErrorIs(t, err, dedup.ErrInvalidConfig)
		require.ErrorContains(t, err, msg)
	}()
	f()
}

func short(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// Bad ids every producer-supplied strategy must reject.
var (
	megabyte   = strings.Repeat("x", 1<<20)
	badUTF8    = "order-\xff-1"
	exactLimit = strings.Repeat("y", dedup.DefaultMaxIDLength)
	overLimit  = strings.Repeat("y", dedup.DefaultMaxIDLength+1)
)
