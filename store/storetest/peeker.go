package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
)

// peekerCases pin dedup.Peeker: it answers for completed, unexpired records
// only, because the receiver replays whatever it returns.
var peekerCases = []testCase{
	{"States", testPeekStates},
	{"Expiry", testPeekExpiry},
}

func (f *fixture) peeker(t *testing.T) dedup.Peeker {
	t.Helper()
	p, ok := f.store.(dedup.Peeker)
	if !ok {
		t.Skip("the store does not implement dedup.Peeker")
	}
	return p
}

// peek asks p for key cut as the receiver cuts it.
func peek(p dedup.Peeker, key string) (dedup.Record, bool) {
	prefix, id := dedup.SplitKey(key)
	if rec := p.Peek(prefix, id); rec != nil {
		return *rec, true
	}
	return dedup.Record{}, false
}

// requireNoPeek requires that Peek finds nothing for key.
func requireNoPeek(t *testing.T, p dedup.Peeker, key, why string) {
	t.Helper()
	_, ok := peek(p, key)
	require.False(t, ok, "Peek(%q) must find nothing: %s", key, why)
}

func testPeekStates(t *testing.T, f *fixture) {
	p := f.peeker(t)
	key := f.key("peek")
	requireNoPeek(t, p, key, "the key is absent")

	c := f.acquire(t, key, "payload-a")
	require.True(t, c.Acquired)
	requireNoPeek(t, p, key, "the key is processing")
	f.release(t, key, c.Token, "boom")
	requireNoPeek(t, p, key, "the key failed")

	c = f.claim(t, key)
	f.complete(t, key, c.Token, []byte("peeked"))
	rec, ok := peek(p, key)
	require.True(t, ok, "Peek must find a completed record")
	require.Equal(t, key, rec.Key)
	require.Equal(t, dedup.StateCompleted, rec.State)
	require.Equal(t, 2, rec.Attempt)
	require.Equal(t, "payload-a", rec.Fingerprint)
	requireBytes(t, []byte("peeked"), rec.Result)
	f.requireFromNow(t, f.retention(), rec.ExpiresAt, "ExpiresAt of a peeked record")

	requireNoPeek(t, p, f.key("peek-other"), "another key is absent")
	// Cut elsewhere, the key may be missed but never mistaken for another.
	for i := range len(key) + 1 {
		if rec := p.Peek(key[:i], key[i:]); rec != nil {
			require.Equal(t, key, rec.Key, "Peek(%q, %q)", key[:i], key[i:])
		}
	}
}

func testPeekExpiry(t *testing.T, f *fixture) {
	p := f.peeker(t)
	done, expired := f.key("peek-done"), f.key("peek-lease")
	f.complete(t, done, f.claim(t, done).Token, []byte("x"))
	f.claim(t, expired)

	f.advance(f.retention() + f.tick)
	requireNoPeek(t, p, done, "the completed record's retention ended")
	requireNoPeek(t, p, expired, "a processing record whose lease expired is still not completed")
}
