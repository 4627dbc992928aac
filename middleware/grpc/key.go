package dedupgrpc

import (
	"context"
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

const (
	// MetadataKey is the metadata the default Key reads first. gRPC metadata
	// names are lower case; grpc-gateway forwards an HTTP caller's
	// Idempotency-Key header under it with gateway.HeaderMatcher.
	MetadataKey = "idempotency-key"
	// FieldName is the request field the default Key reads when the
	// metadata is absent, as many teams put the key in their protos:
	// string idempotency_key = 1;
	FieldName protoreflect.Name = "idempotency_key"
	// MaxKeyLength is the longest key accepted, in bytes.
	MaxKeyLength = 255
)

// ErrBadKey matches the error of a key that is present but unusable:
// empty, longer than MaxKeyLength, not UTF-8, with a control character,
// sent twice. The call is refused with InvalidArgument.
var ErrBadKey = errors.New("dedupgrpc: bad idempotency key")

// KeyFunc finds the idempotency key of a unary call: the incoming
// metadata is in ctx, the decoded request is req. It returns "" and no
// error when the call carries no key, and an error (wrapping ErrBadKey, or
// carrying a gRPC status) when it carries one that is unusable. The
// interceptor checks every key it returns against the rules of
// ValidateKey.
type KeyFunc func(ctx context.Context, fullMethod string, req any) (string, error)

// FromMetadata reads the key from the incoming metadata name (lower case).
// The value may also be an RFC 8941 quoted string ("abc"), as an HTTP
// client may send it through a gateway. Metadata present with an empty
// value, or present twice, is a bad key, not a missing one.
func FromMetadata(name string) KeyFunc {
	return func(ctx context.Context, _ string, _ any) (string, error) {
		vals := metadata.ValueFromIncomingContext(ctx, name)
		switch len(vals) {
		case 0:
			return "", nil
		case 1:
		default:
			return "", fmt.Errorf("%w: %s is sent %d times", ErrBadKey, name, len(vals))
		}
		v := vals[0]
		if len(v) > 0 && v[0] == '"' {
			var err error
			if v, err = unquote(v); err != nil {
				return "", fmt.Errorf("%w: %s: %w", ErrBadKey, name, err)
			}
		}
		if v == "" {
			return "", fmt.Errorf("%w: %s is empty", ErrBadKey, name)
		}
		return v, nil
	}
}

// FromField reads the key from the request's string field name, when the
// request is a proto message with such a field; an unset (empty) field is
// no key. A field of that name that is not a singular string is a bad key:
// the schema does not say what the key is.
func FromField(name protoreflect.Name) KeyFunc {
	return func(_ context.Context, _ string, req any) (string, error) {
		m, ok := req.(proto.Message)
		if !ok {
			return "", nil
		}
		r := m.ProtoReflect()
		fd := r.Descriptor().Fields().ByName(name)
		if fd == nil {
			return "", nil
		}
		if fd.Kind() != protoreflect.StringKind || fd.Cardinality() == protoreflect.Repeated {
			return "", fmt.Errorf("%w: field %s of %s is not a string", ErrBadKey, name, r.Descriptor().FullName())
		}
		return r.Get(fd).String(), nil
	}
}

// FirstOf returns the key of the first of fs that finds one (or fails).
func FirstOf(fs ...KeyFunc) KeyFunc {
	return func(ctx context.Context, method string, req any) (string, error) {
		for _, f := range fs {
			if k, err := f(ctx, method, req); k != "" || err != nil {
				return k, err
			}
		}
		return "", nil
	}
}

// ValidateKey checks a key found in a call: 1 to MaxKeyLength bytes of
// UTF-8 without control characters (C0, DEL, C1). The error wraps
// ErrBadKey.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: the key is empty", ErrBadKey)
	case len(key) > MaxKeyLength:
		return fmt.Errorf("%w: the key is %d bytes, over the limit of %d", ErrBadKey, len(key), MaxKeyLength)
	}
	for i, r := range key {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(key[i:]); size == 1 {
				return fmt.Errorf("%w: the key is not valid UTF-8 (byte %d)", ErrBadKey, i)
			}
		}
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: the key has a control character %U at byte %d", ErrBadKey, r, i)
		}
	}
	return nil
}

// unquote decodes an RFC 8941 sf-string: printable ASCII between double
// quotes, with \" and \\ the only escapes.
func unquote(s string) (string, error) {
	if len(s) < 2 || s[len(s)-1] != '"' {
		return "", errors.New("an unterminated quoted string")
	}
	in := s[1 : len(s)-1]
	out := make([]byte, 0, len(in))
	for i := 0; i < len(in); i++ {
		c := in[i]
		switch {
		case c == '\\':
			i++
			if i == len(in) || (in[i] != '"' && in[i] != '\\') {
				return "", errors.New("a quoted string with a bad escape")
			}
			out = append(out, in[i])
		case c == '"':
			return "", errors.New("a quoted string with an unescaped quote")
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("a quoted string with the byte %#x", c)
		default:
			out = append(out, c)
		}
	}
	return string(out), nil
}
