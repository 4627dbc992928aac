package issuedkey_test

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/middleware/http/issuedkey"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	epoch   = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	secretA = bytes.Repeat([]byte("a"), 32)
	secretB = bytes.Repeat([]byte("b"), 32)
)

func newIssuer(t *testing.T, clk clock.Clock, keys ...issuedkey.Key) *issuedkey.Issuer {
	t.Helper()
	if len(keys) == 0 {
		keys = []issuedkey.Key{{ID: "k1", Secret: secretA}}
	}
	iss, err := issuedkey.NewIssuer(&issuedkey.Options{Keys: keys, TTL: time.Hour, Clock: clk})
	require.NoError(t, err)
	return iss
}

func TestIssueVerify(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	iss := newIssuer(t, clk)
	k, err := iss.Issue("tenant-42", "POST /orders/o-1/pay")
	require.NoError(t, err)
	require.LessOrEqual(t, len(k.Key), issuedkey.MaxLength)
	require.True(t, strings.HasPrefix(k.Key, "v1.k1."))
	require.Equal(t, epoch.Add(time.Hour), k.ExpiresAt)
	require.NotContains(t, k.Key, "tenant-42")
	for _, c := range []byte(k.Key) {
		require.True(t, c > 0x20 && c < 0x7f, "%q is not printable ASCII", c)
	}
	require.NoError(t, iss.Verify(k.Key, "tenant-42", "POST /orders/o-1/pay"))

	k2, err := iss.Issue("tenant-42", "POST /orders/o-1/pay")
	require.NoError(t, err)
	require.NotEqual(t, k.Key, k2.Key, "two keys for the same operation must differ")
}

// TestVerifyRefuses: forged, expired, another principal's, another
// operation's: each its error.
func TestVerifyRefuses(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	iss := newIssuer(t, clk)
	k, err := iss.Issue("alice", "pay")
	require.NoError(t, err)

	other := newIssuer(t, clk, issuedkey.Key{ID: "k1", Secret: secretB}) // same id, other secret
	forgedByOther, err := other.Issue("alice", "pay")
	require.NoError(t, err)

	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(k.Key, "v1.k1."))
	require.NoError(t, err)
	flipped := func(i int) string {
		b := bytes.Clone(raw)
		b[i] ^= 1
		return "v1.k1." + base64.RawURLEncoding.EncodeToString(b)
	}

	// The last character carries 2 bits and 4 of padding: another spelling
	// of the same bytes.
	alphabet := "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, k.Key[len(k.Key)-1])
	respelled := k.Key[:len(k.Key)-1] + string(alphabet[last^1])

	for name, key := range map[string]string{
		"respelled":         respelled,
		"other secret":      forgedByOther.Key,
		"expiry changed":    flipped(7),
		"nonce changed":     flipped(10),
		"principal changed": flipped(25),
		"signature changed": flipped(len(raw) - 1),
		"unknown key id":    strings.Replace(k.Key, "v1.k1.", "v1.k2.", 1),
		"other version":     strings.Replace(k.Key, "v1.", "v2.", 1),
		"truncated":         k.Key[:len(k.Key)-1],
		"padded":            k.Key + "A",
		"not base64":        k.Key[:len(k.Key)-2] + "!!",
		"client's own":      "order-1-payment",
		"empty":             "",
		"no encoded part":   "v1.k1",
		"dots only":         "v1..",
	} {
		require.ErrorIs(t, iss.Verify(key, "alice", "pay"), issuedkey.ErrNotIssued, name)
	}
	require.ErrorIs(t, iss.Verify(k.Key, "bob", "pay"), issuedkey.ErrWrongPrincipal)
	require.ErrorIs(t, iss.Verify(k.Key, "alice", "refund"), issuedkey.ErrWrongOperation)
	require.NoError(t, iss.Verify(k.Key, "alice", "pay"))
	clk.Advance(time.Hour - time.Second)
	require.NoError(t, iss.Verify(k.Key, "alice", "pay"))
	clk.Advance(time.Second)
	require.ErrorIs(t, iss.Verify(k.Key, "alice", "pay"), issuedkey.ErrExpired)
	require.ErrorIs(t, iss.Verify(k.Key, "bob", "pay"), issuedkey.ErrWrongPrincipal, "another principal's key is refused as such, expired or not")
}

// TestRotation: the first key signs, every key verifies.
func TestRotation(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	old := newIssuer(t, clk, issuedkey.Key{ID: "2026-10", Secret: secretA})
	k, err := old.Issue("alice", "pay")
	require.NoError(t, err)
	rotated := newIssuer(t, clk, issuedkey.Key{ID: "2026-11", Secret: secretB}, issuedkey.Key{ID: "2026-10", Secret: secretA})
	require.NoError(t, rotated.Verify(k.Key, "alice", "pay"))
	k2, err := rotated.Issue("alice", "pay")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(k2.Key, "v1.2026-11."))
	require.ErrorIs(t, old.Verify(k2.Key, "alice", "pay"), issuedkey.ErrNotIssued)
	dropped := newIssuer(t, clk, issuedkey.Key{ID: "2026-11", Secret: secretB})
	require.ErrorIs(t, dropped.Verify(k.Key, "alice", "pay"), issuedkey.ErrNotIssued)
}

func TestOptionsRefused(t *testing.T) {
	t.Parallel()
	for name, o := range map[string]*issuedkey.Options{
		"nil":           nil,
		"no keys":       {},
		"short secret":  {Keys: []issuedkey.Key{{ID: "a", Secret: []byte("short")}}},
		"empty id":      {Keys: []issuedkey.Key{{Secret: secretA}}},
		"id with dot":   {Keys: []issuedkey.Key{{ID: "a.b", Secret: secretA}}},
		"long id":       {Keys: []issuedkey.Key{{ID: strings.Repeat("a", 33), Secret: secretA}}},
		"duplicate ids": {Keys: []issuedkey.Key{{ID: "a", Secret: secretA}, {ID: "a", Secret: secretB}}},
		"negative TTL":  {Keys: []issuedkey.Key{{ID: "a", Secret: secretA}}, TTL: -time.Second},
	} {
		_, err := issuedkey.NewIssuer(o)
		require.ErrorIs(t, err, dedup.ErrInvalidConfig, name)
	}
	// The longest key id still gives a key within MaxLength.
	iss := newIssuer(t, clock.Real(), issuedkey.Key{ID: strings.Repeat("z", issuedkey.MaxKeyIDLength), Secret: secretA})
	k, err := iss.Issue("p", "o")
	require.NoError(t, err)
	require.Len(t, k.Key, issuedkey.MaxLength)
	require.LessOrEqual(t, issuedkey.MaxLength, 255)
}

// TestSecretCopied: changing the caller's secret slice after NewIssuer
// changes nothing.
func TestSecretCopied(t *testing.T) {
	t.Parallel()
	secret := bytes.Clone(secretA)
	iss := newIssuer(t, clock.Real(), issuedkey.Key{ID: "k", Secret: secret})
	k, err := iss.Issue("p", "o")
	require.NoError(t, err)
	secret[0] = 'z'
	require.NoError(t, iss.Verify(k.Key, "p", "o"))
}
