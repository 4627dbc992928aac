package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
)

// peekerCases pin store.Peeker: it answers for completed, unexpired records
// only, because the receiver replays whatever it returns.
var peekerCases = []testCase{
	{"States", testPeekStates},
	{"Expiry", testPeekExpiry},
}

func (f *fixture) peeker(t *testing.T) store.Peeker {
	t.Helper()
	p, ok := f.store.(store.Peeker)
	if !ok {
		t.Skip("the store does not implement store.Peeker")
	}
	return p
}

// peek asks p for key cut as the receiver cuts it.
func peek(p store.Peeker, key string) (store.Record, bool) {
	prefix, id := store.SplitKey(key)
	if rec := p.Peek(prefix, id); rec != nil {
		return *rec, true
	}
	return store.Record{}, false
}

// requireNoPeek requires that Peek finds nothing for key.
func requireNoPeek(t *testing.T, p store.Peeker, key, why string) {
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

	c = f.retry(t, key, "", 2)
	w := f.complete(t, key, c.Token, []byte("peeked"))
	rec, ok := peek(p, key)
	f.expectKept(t, key, ok, "Peek(%q) must find a completed record", key)
	require.Equal(t, key, rec.Key)
	require.Equal(t, store.StateCompleted, rec.State)
	require.Equal(t, 2, rec.Attempt)
	require.Equal(t, "payload-a", rec.Fingerprint)
	requireBytes(t, []byte("peeked"), rec.Result)
	w.requireAt(t, f.retention(), rec.ExpiresAt, "ExpiresAt of a peeked record")

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

	f.advance(f.retention())
	requireNoPeek(t, p, done, "the completed record's retention ended")
	requireNoPeek(t, p, expired, "a processing record whose lease expired is still not completed")
}
