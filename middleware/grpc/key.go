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

	"github.com/dedup-go/dedup"
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
)

// maxKeyLength is the longest key accepted, in bytes.
const maxKeyLength = 255

// Call is a unary call as Options.Key sees it: the message type of the
// dedup.KeyFunc that finds its idempotency key, so that the strategies of
// package idstrategy compose gRPC key funcs as they compose any other
// (idstrategy.FirstOf(FromMetadata(MetadataKey), FromField("request_id"))).
type Call struct {
	// Ctx is the call's context, with the incoming metadata.
	Ctx context.Context
	// FullMethod is the method called ("/package.Service/Method").
	FullMethod string
	// Req is the decoded request.
	Req any
}

// FromMetadata reads the key from the incoming metadata name (lower case).
// The value may also be an RFC 8941 quoted string ("abc"), as an HTTP
// client may send it through a gateway. A call without the metadata has no
// key (an error matching dedup.ErrNoKey); metadata present with an empty
// value, or present twice, is a bad key (dedup.ErrInvalidKey), not a
// missing one.
func FromMetadata(name string) dedup.KeyFunc[Call] {
	missing := fmt.Errorf("%w: no %s metadata", dedup.ErrNoKey, name)
	return func(c Call) (string, error) {
		vals := metadata.ValueFromIncomingContext(c.Ctx, name)
		switch len(vals) {
		case 0:
			return "", missing
		case 1:
		default:
			return "", fmt.Errorf("%w: %s is sent %d times", dedup.ErrInvalidKey, name, len(vals))
		}
		v := vals[0]
		if len(v) > 0 && v[0] == '"' {
			var err error
			if v, err = unquote(v); err != nil {
				return "", fmt.Errorf("%w: %s: %w", dedup.ErrInvalidKey, name, err)
			}
		}
		if v == "" {
			return "", fmt.Errorf("%w: %s is empty", dedup.ErrInvalidKey, name)
		}
		return v, nil
	}
}

// FromField reads the key from the request's string field name, when the
// request is a proto message with such a field. A request that is not a
// proto message, has no such field or leaves it unset (empty) has no key
// (an error matching dedup.ErrNoKey). A field of that name that is not a
// singular string is a bad key (dedup.ErrInvalidKey): the schema does not
// say what the key is.
func FromField(name protoreflect.Name) dedup.KeyFunc[Call] {
	missing := fmt.Errorf("%w: no %s field", dedup.ErrNoKey, name)
	return func(c Call) (string, error) {
		m, ok := c.Req.(proto.Message)
		if !ok {
			return "", missing
		}
		r := m.ProtoReflect()
		fd := r.Descriptor().Fields().ByName(name)
		if fd == nil {
			return "", missing
		}
		if fd.Kind() != protoreflect.StringKind || fd.Cardinality() == protoreflect.Repeated {
			return "", fmt.Errorf("%w: field %s of %s is not a string", dedup.ErrInvalidKey, name, r.Descriptor().FullName())
		}
		if v := r.Get(fd).String(); v != "" {
			return v, nil
		}
		return "", missing
	}
}

// defaultKey is the default of Options.Key: the MetadataKey metadata, else
// the FieldName field. It is what idstrategy.FirstOf of the two finds,
// without the errors FirstOf builds for a call that carries no key.
func defaultKey() dedup.KeyFunc[Call] {
	meta, field := FromMetadata(MetadataKey), FromField(FieldName)
	return func(c Call) (string, error) {
		if k, err := meta(c); !errors.Is(err, dedup.ErrNoKey) {
			return k, err
		}
		return field(c)
	}
}

// validateKey checks a key found in a call: 1 to maxKeyLength bytes of
// UTF-8 without control characters (C0, DEL, C1). The error matches
// dedup.ErrInvalidKey.
func validateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: the key is empty", dedup.ErrInvalidKey)
	case len(key) > maxKeyLength:
		return fmt.Errorf("%w: the key is %d bytes, over the limit of %d", dedup.ErrInvalidKey, len(key), maxKeyLength)
	}
	for i, r := range key {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(key[i:]); size == 1 {
				return fmt.Errorf("%w: the key is not valid UTF-8 (byte %d)", dedup.ErrInvalidKey, i)
			}
		}
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: the key has a control character %U at byte %d", dedup.ErrInvalidKey, r, i)
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
