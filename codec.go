package dedup

import "encoding/json"

// Codec turns handler results into bytes for the store and back.
type Codec interface {
	// Marshal encodes v.
	Marshal(v any) ([]byte, error)
	// Unmarshal decodes data into the value v points to.
	Unmarshal(data []byte, v any) error
}

// JSON is the default Codec, backed by encoding/json.
type JSON struct{}

// Marshal encodes v as JSON.
func (JSON) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal decodes JSON data into v.
func (JSON) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
