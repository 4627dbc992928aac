package redrive

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// KeyFrom derives the store key of a broker's dead letter (RabbitMQ's
// x-death letters carry no Dedup-Key) the way the receiver's key
// strategy does: from the message id property (idstrategy.MessageID), a
// header (idstrategy.MessageHeader) or a top-level field of a JSON body
// (idstrategy.BodyField), in Namespace. Without it such a letter's record
// can be neither forgotten nor read.
type KeyFrom struct {
	// Namespace is the receiver's namespace.
	Namespace string
	// From is "message-id", "header:NAME" or "json:FIELD".
	From string
}

// ParseKeyFrom checks a --key-from value.
func ParseKeyFrom(from, namespace string) (*KeyFrom, error) {
	kind, name, _ := strings.Cut(from, ":")
	switch {
	case kind == "message-id" && name == "":
	case (kind == "header" || kind == "json") && name != "":
	default:
		return nil, fmt.Errorf("key-from %q: want message-id, header:NAME or json:FIELD", from)
	}
	if namespace == "" {
		return nil, fmt.Errorf("key-from %q needs the receivers' namespace", from)
	}
	return &KeyFrom{Namespace: namespace, From: from}, nil
}

// Key returns the store key of l, or an error saying why there is none.
func (k *KeyFrom) Key(l *Letter) (string, error) {
	kind, name, _ := strings.Cut(k.From, ":")
	var id string
	switch kind {
	case "message-id":
		id = l.MessageID
	case "header":
		if l.Header != nil {
			id, _ = l.Header(name)
		}
	case "json":
		var doc map[string]any
		dec := json.NewDecoder(bytes.NewReader(l.Body))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil {
			return "", fmt.Errorf("the body is not a JSON object: %w", err)
		}
		switch v := doc[name].(type) {
		case string:
			id = v
		case json.Number:
			id = v.String()
		}
	}
	if id == "" {
		return "", fmt.Errorf("no %s", k.From)
	}
	return k.Namespace + ":" + id, nil
}
