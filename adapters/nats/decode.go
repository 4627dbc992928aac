package nats

import (
	"encoding/json"
	"fmt"
)

// Decoder turns a message's data into the user's type. dedup.JSON is one;
// so is any dedup.Codec.
type Decoder interface {
	// Unmarshal decodes data into the value v points to.
	Unmarshal(data []byte, v any) error
}

// DecoderFunc adapts a function to Decoder.
type DecoderFunc func(data []byte, v any) error

// Unmarshal calls f.
func (f DecoderFunc) Unmarshal(data []byte, v any) error { return f(data, v) }

// JSON decodes bodies with encoding/json: the default Decoder. An empty body
// is an error (it is no JSON document), so it is dead-lettered as
// undecodable rather than handled as a zero value.
type JSON struct{}

// Unmarshal decodes the JSON document data into v.
func (JSON) Unmarshal(data []byte, v any) error {
	if len(data) == 0 {
		return fmt.Errorf("empty body")
	}
	return json.Unmarshal(data, v)
}

// Raw hands the data over undecoded, for bodies of type []byte, string or
// json.RawMessage. The []byte is a copy: the body may outlive the message.
type Raw struct{}

// Unmarshal stores data in v, which must be a *[]byte, *string or
// *json.RawMessage.
func (Raw) Unmarshal(data []byte, v any) error {
	switch p := v.(type) {
	case *[]byte:
		*p = append([]byte(nil), data...)
	case *json.RawMessage:
		*p = append(json.RawMessage(nil), data...)
	case *string:
		*p = string(data)
	default:
		return fmt.Errorf("dedupnats: Raw decodes into *[]byte, *string or *json.RawMessage, not %T", v)
	}
	return nil
}

// Compile-time checks.
var (
	_ Decoder = JSON{}
	_ Decoder = Raw{}
	_ Decoder = DecoderFunc(nil)
)
