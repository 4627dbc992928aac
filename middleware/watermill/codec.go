package dedupwatermill

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/dedup-go/dedup"
)

// produced is the receiver's result: the messages a handler produced, or,
// for a duplicate whose first delivery's messages were too large to keep,
// why they were not kept.
type produced struct {
	msgs    []*message.Message
	notKept string
	// taken is set once msgs went to a router (see take).
	taken atomic.Bool
}

// noneProduced is every duplicate's value when the handler produced
// nothing.
var noneProduced produced

// The first byte of a kept record says what follows.
const (
	// kindMessages: uvarint count, then per message: uvarint length and
	// UUID, uvarint count of metadata pairs, each pair as uvarint length
	// and key, uvarint length and value (in key order), uvarint length and
	// payload.
	kindMessages byte = 1
	// kindNotKept: the reason, to the end.
	kindNotKept byte = 2
)

// notKeptSlack is room above Options' cap for a "not kept" record.
const notKeptSlack = 512

// codec is the receiver's dedup.Codec for *produced.
type codec struct{}

var _ dedup.Codec = codec{}

// encodedSize is the size of msgs encoded as kindMessages.
func encodedSize(msgs []*message.Message) int {
	n := 1 + binary.MaxVarintLen64
	for _, m := range msgs {
		n += 3*binary.MaxVarintLen64 + len(m.UUID) + len(m.Payload)
		for k, v := range m.Metadata {
			n += 2*binary.MaxVarintLen64 + len(k) + len(v)
		}
	}
	return n
}

// Marshal encodes a *produced.
func (codec) Marshal(v any) ([]byte, error) {
	p, ok := v.(*produced)
	if !ok {
		return nil, fmt.Errorf("dedupwatermill: cannot keep a %T", v)
	}
	if p == nil || len(p.msgs) == 0 && p.notKept == "" {
		return []byte{kindMessages, 0}, nil
	}
	if p.notKept != "" {
		return append([]byte{kindNotKept}, p.notKept...), nil
	}
	buf := make([]byte, 0, encodedSize(p.msgs))
	buf = append(buf, kindMessages)
	buf = binary.AppendUvarint(buf, uint64(len(p.msgs)))
	var keys []string
	for _, m := range p.msgs {
		if m == nil {
			return nil, errors.New("dedupwatermill: the handler produced a nil message")
		}
		buf = appendString(buf, m.UUID)
		keys = keys[:0]
		for k := range m.Metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		buf = binary.AppendUvarint(buf, uint64(len(keys)))
		for _, k := range keys {
			buf = appendString(buf, k)
			buf = appendString(buf, m.Metadata[k])
		}
		buf = binary.AppendUvarint(buf, uint64(len(m.Payload)))
		buf = append(buf, m.Payload...)
	}
	return buf, nil
}

func appendString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

var errCorrupt = errors.New("dedupwatermill: kept produced messages are corrupt")

// Unmarshal decodes a kept record into the *produced v points to: fresh
// messages with the kept UUIDs, metadata and payloads.
func (codec) Unmarshal(data []byte, v any) error {
	out, ok := v.(**produced)
	if !ok {
		return fmt.Errorf("dedupwatermill: cannot decode into a %T", v)
	}
	if len(data) == 0 {
		return errCorrupt
	}
	if len(data) == 2 && data[0] == kindMessages && data[1] == 0 {
		*out = &noneProduced // never changed: take returns its nil msgs
		return nil
	}
	p := &produced{}
	switch data[0] {
	case kindNotKept:
		p.notKept = string(data[1:])
	case kindMessages:
		r := reader{b: data[1:]}
		n := r.uvarint()
		if n > uint64(len(r.b)) { // every message takes at least a byte
			return errCorrupt
		}
		if n > 0 {
			p.msgs = make([]*message.Message, 0, n)
		}
		for range n {
			uuid := r.string()
			pairs := r.uvarint()
			if pairs > uint64(len(r.b)) {
				return errCorrupt
			}
			md := make(message.Metadata, pairs)
			for range pairs {
				k := r.string()
				md[k] = r.string()
			}
			payload := r.bytes()
			if r.bad {
				return errCorrupt
			}
			m := message.NewMessage(uuid, payload)
			m.Metadata = md
			p.msgs = append(p.msgs, m)
		}
		if r.bad || len(r.b) != 0 {
			return errCorrupt
		}
	default:
		return fmt.Errorf("dedupwatermill: kept record of unknown kind %d", data[0])
	}
	*out = p
	return nil
}

// reader reads what Marshal wrote; bad is set on the first short read.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		r.b = nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.bad = true
		r.b = nil
		return nil
	}
	out := make([]byte, n)
	copy(out, r.b[:n])
	r.b = r.b[n:]
	return out
}

func (r *reader) string() string {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.bad = true
		r.b = nil
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}
