package issuedkey

import (
	"cmp"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/clock"
)

// Errors of Verify. Match them with errors.Is.
var (
	// ErrNotIssued: the key was not issued by this server: malformed,
	// signed with an unknown key id, or its signature does not match.
	ErrNotIssued = errors.New("issuedkey: the key was not issued by this server")
	// ErrWrongPrincipal: the key was issued to another principal.
	ErrWrongPrincipal = errors.New("issuedkey: the key was issued to another principal")
	// ErrWrongOperation: the key was issued for another operation.
	ErrWrongOperation = errors.New("issuedkey: the key was issued for another operation")
	// ErrExpired: the key is past its expiry.
	ErrExpired = errors.New("issuedkey: the key has expired")
)

// Verifier checks a server-issued key for the principal and operation of
// the request that carries it. It returns nil, or an error matching
// ErrNotIssued, ErrWrongPrincipal, ErrWrongOperation or ErrExpired.
// Middleware of any transport takes a Verifier; *Issuer is one.
type Verifier interface {
	Verify(key, principal, operation string) error
}

// MinSecretSize is the shortest secret accepted, in bytes.
const MinSecretSize = 32

const (
	// defaultTTL is how long an issued key is valid by default: the
	// default retention of a dedup record, so that a client may retry for
	// as long as its first outcome is kept.
	defaultTTL = 24 * time.Hour
	// maxKeyIDLength is the longest key id accepted, in bytes.
	maxKeyIDLength = 32
	// maxLength is the longest key an Issuer mints, in bytes.
	maxLength = len(version) + maxKeyIDLength + 1 + encodedLen
)

const (
	version    = "v1."
	nonceSize  = 12
	bindSize   = 12 // keyed hashes of the principal and of the operation
	payloadLen = 8 + nonceSize + 2*bindSize
	rawLen     = payloadLen + sha256.Size
)

// encodedLen is b64.EncodedLen(rawLen), as a constant.
const encodedLen = (rawLen*8 + 5) / 6

// Strict: a key has exactly one spelling, so that no client can present
// one issued key as several (each would be a record of its own).
var b64 = base64.RawURLEncoding.Strict()

// Key is one signing secret and the id that names it in the keys it signs.
type Key struct {
	// ID names the secret in every key it signs, so that a verifier picks
	// the right one after a rotation: 1 to 32 bytes of letters, digits, '-'
	// and '_'.
	ID string
	// Secret is at least MinSecretSize random bytes. Keep it out of source
	// control.
	Secret []byte
}

// Options configures an Issuer. A nil *Options means all defaults; but
// the secrets have none, so NewIssuer refuses a nil *Options, as it
// refuses options without Keys.
type Options struct {
	// Keys are the secrets: the first signs new keys, every one verifies.
	// Put a new secret first to rotate, and drop an old one once the keys
	// it signed have expired. IDs must be distinct. Defaults to none: at
	// least one is required.
	Keys []Key

	// TTL is how long an issued key is valid. Defaults to 24h, the default
	// retention of a dedup record, so that a client may retry for as long
	// as its first outcome is kept.
	TTL time.Duration

	// Clock is the time source of expiries. Defaults to clock.Real().
	Clock clock.Clock
}

// Issuer mints keys bound to a principal and an operation, and verifies
// them. It is safe for concurrent use and keeps no state beyond its
// options: issuing a key writes nothing.
type Issuer struct {
	keys  []Key
	ttl   time.Duration
	clock clock.Clock
}

var _ Verifier = (*Issuer)(nil)

// NewIssuer returns an Issuer, or an error matching dedup.ErrInvalidConfig
// for invalid options (nil ones too).
func NewIssuer(opts *Options) (*Issuer, error) {
	if opts == nil || len(opts.Keys) == 0 {
		return nil, fmt.Errorf("%w: at least one key is required", dedup.ErrInvalidConfig)
	}
	seen := make(map[string]bool, len(opts.Keys))
	keys := make([]Key, len(opts.Keys))
	for i, k := range opts.Keys {
		switch {
		case !validKeyID(k.ID):
			return nil, fmt.Errorf("%w: key id %q: use 1 to %d letters, digits, '-' or '_'", dedup.ErrInvalidConfig, k.ID, maxKeyIDLength)
		case seen[k.ID]:
			return nil, fmt.Errorf("%w: key id %q appears twice", dedup.ErrInvalidConfig, k.ID)
		case len(k.Secret) < MinSecretSize:
			return nil, fmt.Errorf("%w: the secret of key %q is %d bytes; it must be at least %d", dedup.ErrInvalidConfig, k.ID, len(k.Secret), MinSecretSize)
		}
		seen[k.ID] = true
		// A copy, so that a caller reusing its slice cannot change a secret.
		keys[i] = Key{ID: k.ID, Secret: append([]byte(nil), k.Secret...)}
	}
	if opts.TTL < 0 {
		return nil, fmt.Errorf("%w: TTL is %v; it must be positive", dedup.ErrInvalidConfig, opts.TTL)
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.Real()
	}
	return &Issuer{keys: keys, ttl: cmp.Or(opts.TTL, defaultTTL), clock: clk}, nil
}

func validKeyID(id string) bool {
	if id == "" || len(id) > maxKeyIDLength {
		return false
	}
	for i := range len(id) {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Issued is a key minted by Issue.
type Issued struct {
	// Key is what the client sends back, in an Idempotency-Key header (or
	// idempotency-key gRPC metadata).
	Key string
	// Principal and Operation are what the key is bound to.
	Principal, Operation string
	// ExpiresAt is when the key stops being accepted.
	ExpiresAt time.Time
}

// Issue mints a key for principal to use once on operation, valid for the
// Issuer's TTL. It writes nothing: the key carries its own proof.
func (i *Issuer) Issue(principal, operation string) (Issued, error) {
	exp := i.clock.Now().Add(i.ttl).Truncate(time.Second)
	k := i.keys[0]
	var raw [rawLen]byte
	binary.BigEndian.PutUint64(raw[:8], uint64(exp.Unix()))
	if _, err := rand.Read(raw[8 : 8+nonceSize]); err != nil {
		return Issued{}, fmt.Errorf("issuedkey: read random nonce: %w", err)
	}
	bind(raw[8+nonceSize:], k.Secret, principal, operation)
	sign(raw[payloadLen:payloadLen], k, raw[:payloadLen])
	var sb strings.Builder
	sb.Grow(len(version) + len(k.ID) + 1 + encodedLen)
	sb.WriteString(version)
	sb.WriteString(k.ID)
	sb.WriteByte('.')
	enc := make([]byte, encodedLen)
	b64.Encode(enc, raw[:])
	sb.Write(enc)
	return Issued{Key: sb.String(), Principal: principal, Operation: operation, ExpiresAt: exp}, nil
}

// Verify checks that key was issued by this Issuer (under any of its
// secrets) to principal for operation, and has not expired. See the
// package documentation for the errors and their order.
func (i *Issuer) Verify(key, principal, operation string) error {
	rest, ok := strings.CutPrefix(key, version)
	if !ok {
		return fmt.Errorf("%w: not a %s key", ErrNotIssued, strings.TrimSuffix(version, "."))
	}
	id, enc, ok := strings.Cut(rest, ".")
	if !ok || len(enc) != encodedLen {
		return fmt.Errorf("%w: malformed", ErrNotIssued)
	}
	k, ok := i.key(id)
	if !ok {
		return fmt.Errorf("%w: unknown key id %q", ErrNotIssued, id)
	}
	var raw [rawLen]byte
	if n, err := b64.Decode(raw[:], []byte(enc)); err != nil || n != rawLen {
		return fmt.Errorf("%w: malformed", ErrNotIssued)
	}
	var mac [sha256.Size]byte
	if !hmac.Equal(sign(mac[:0], k, raw[:payloadLen]), raw[payloadLen:]) {
		return fmt.Errorf("%w: the signature does not match", ErrNotIssued)
	}
	var want [2 * bindSize]byte
	bind(want[:], k.Secret, principal, operation)
	got := raw[8+nonceSize : payloadLen]
	if !hmac.Equal(want[:bindSize], got[:bindSize]) {
		return ErrWrongPrincipal
	}
	if !hmac.Equal(want[bindSize:], got[bindSize:]) {
		return ErrWrongOperation
	}
	exp := time.Unix(int64(binary.BigEndian.Uint64(raw[:8])), 0)
	if !i.clock.Now().Before(exp) {
		return fmt.Errorf("%w: at %v", ErrExpired, exp.UTC().Format(time.RFC3339))
	}
	return nil
}

func (i *Issuer) key(id string) (Key, bool) {
	for _, k := range i.keys {
		if k.ID == id {
			return k, true
		}
	}
	return Key{}, false
}

// sign appends the HMAC-SHA256, under k, of the key id and payload to dst.
// The key id is signed so that a key cannot be moved under another id.
func sign(dst []byte, k Key, payload []byte) []byte {
	m := hmac.New(sha256.New, k.Secret)
	m.Write([]byte("dedup issued key v1\x00"))
	m.Write([]byte(k.ID))
	m.Write([]byte{0})
	m.Write(payload)
	return m.Sum(dst)
}

// bind writes the keyed hashes of principal and operation into dst
// (2*bindSize bytes), each hashed on its own. Keyed, so that a key does
// not reveal a guessable principal (a user id) to whoever reads it.
func bind(dst, secret []byte, principal, operation string) {
	for j, s := range [2]string{principal, operation} {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(s))
		var sum [sha256.Size]byte
		copy(dst[j*bindSize:(j+1)*bindSize], m.Sum(sum[:0]))
	}
}
