package idstrategy_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
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
	require.NoError(t, adapter.ValidateID(id, 0), "the returned id must pass ValidateID")
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
	exactLimit = strings.Repeat("y", adapter.DefaultMaxIDLength)
	overLimit  = strings.Repeat("y", adapter.DefaultMaxIDLength+1)
)

// keyCase is one row of a strategy's table test: the id the strategy
// gives for in, or the error (matching target, containing msg).
type keyCase[M any] struct {
	name   string
	key    dedup.KeyFunc[M] // the row's own strategy; nil: the table's
	in     M
	want   string
	target error
	msg    string
}

// runKeyCases runs each row in parallel against its strategy, or key.
func runKeyCases[M any](t *testing.T, key dedup.KeyFunc[M], cases []keyCase[M]) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k := key
			if tt.key != nil {
				k = tt.key
			}
			id, err := k(tt.in)
			if tt.target != nil {
				wantErr(t, id, err, tt.target, tt.msg)
				require.Less(t, len(err.Error()), 300, "errors stay short whatever the input")
				return
			}
			wantID(t, id, err, tt.want)
		})
	}
}
