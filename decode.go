package dedup

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Decoder turns a message's data into the body type adapters hand the
// handler. JSONDecoder is the default of every adapter; any Codec is a
// Decoder too.
type Decoder interface {
	// Unmarshal decodes data into the value v points to.
	Unmarshal(data []byte, v any) error
}

// DecoderFunc adapts a function to Decoder.
type DecoderFunc func(data []byte, v any) error

// Unmarshal calls f.
func (f DecoderFunc) Unmarshal(data []byte, v any) error { return f(data, v) }

// JSONDecoder decodes bodies with encoding/json, strictly: an empty body is
// no JSON document, and a body that is not valid UTF-8 is refused rather
// than decoded with U+FFFD in place of its bad bytes (which would give two
// different messages the same id). Both are undecodable: dead-lettered.
type JSONDecoder struct{}

// Unmarshal decodes the JSON document data into v.
func (JSONDecoder) Unmarshal(data []byte, v any) error {
	switch {
	case len(data) == 0:
		return errors.New("empty body")
	case !utf8.Valid(data):
		return errors.New("body is not valid UTF-8")
	}
	return json.Unmarshal(data, v)
}

// RawDecoder hands the data over undecoded, for bodies of type []byte,
// string or json.RawMessage. The []byte is a copy: the body may outlive the
// broker's buffer.
type RawDecoder struct{}

// Unmarshal stores data in v, which must be a *[]byte, *string or
// *json.RawMessage.
func (RawDecoder) Unmarshal(data []byte, v any) error {
	switch p := v.(type) {
	case *[]byte:
		*p = append([]byte(nil), data...)
	case *json.RawMessage:
		*p = append(json.RawMessage(nil), data...)
	case *string:
		*p = string(data)
	default:
		return fmt.Errorf("RawDecoder decodes into *[]byte, *string or *json.RawMessage, not %T", v)
	}
	return nil
}

var (
	_ Decoder = JSONDecoder{}
	_ Decoder = RawDecoder{}
	_ Decoder = DecoderFunc(nil)
	_ Decoder = JSONCodec{}
)
