package outbox_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/outbox"
)

// TestMessageIDGolden pins the derivation: an id that changed between two
// versions would make a handler that runs again after an upgrade publish
// copies that the next consumer does not recognise. The values were
// computed apart from this code (Python's hashlib over the documented
// bytes).
func TestMessageIDGolden(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ key, name, id string }{
		{"billing:o-1", "payment-captured", "d6a1af9a13c5f37824d181ef701287cf"},
		{"billing:o-1", "1", "d90a242bccddfa7d12f731122c12fcbd"},
		{"", "x", ""},
	} {
		got := outbox.MessageID(c.key, c.name)
		require.Len(t, got, outbox.IDLength)
		require.NoError(t, adapter.ValidateID(got, 0), "a valid message id for every receiver")
		if c.id != "" {
			require.Equal(t, c.id, got, "MessageID(%q, %q)", c.key, c.name)
		}
	}
}

// TestMessageIDUnambiguous: the boundary between key and name cannot
// move, and nothing else enters.
func TestMessageIDUnambiguous(t *testing.T) {
	t.Parallel()
	seen := map[string][2]string{}
	for _, p := range [][2]string{
		{"a:b", "c"}, {"a", "b:c"}, {"a:bc", ""}, {"", "a:bc"}, {"a:b\x00", "c"}, {"a:b", "\x00c"},
		{"billing:o-1", "1"}, {"billing:o-1", "2"}, {"billing:o-11", ""}, {"shipping:o-1", "1"},
	} {
		id := outbox.MessageID(p[0], p[1])
		require.Equal(t, id, outbox.MessageID(p[0], p[1]), "deterministic")
		prev, dup := seen[id]
		require.False(t, dup, "%q and %q share an id", p, prev)
		seen[id] = p
	}
}

func TestNewMessageID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := outbox.NewMessageID()
		if len(id) != outbox.IDLength || strings.Trim(id, "0123456789abcdef") != "" {
			t.Fatalf("NewMessageID() = %q: not %d lowercase hex digits", id, outbox.IDLength)
		}
		if seen[id] {
			t.Fatalf("NewMessageID() repeated %q", id)
		}
		seen[id] = true
	}
}
