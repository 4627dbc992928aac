package dedupgrpc

import (
	"encoding/binary"
	"errors"
	"fmt"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/dedup-go/dedup"
)

// reply is what the receiver's handler returns and the store keeps: a
// response, the reason a response was not kept, or a kept error.
type reply struct {
	// resp is what the handler returned, handed back as is to the caller
	// that ran it; for a replay, the fresh message decoded from the store.
	resp any
	// notKept says why a successful call's response is not replayed.
	notKept string
	// err is a handler error kept by Options.KeepError.
	err *status.Status
}

// The first byte of a kept record says what follows.
const (
	kindResponse byte = 1 // uvarint length, message full name, marshalled message
	kindNotKept  byte = 2 // reason
	kindError    byte = 3 // marshalled google.rpc.Status
)

// notKeptSlack is room above the response cap for a "not kept" record.
const notKeptSlack = 512

// codec is the receiver's dedup.Codec: it keeps a response as its message
// type's full name and its wire bytes, so that a replay decodes into a
// fresh message of that type, found in types, else in
// protoregistry.GlobalTypes. Any other value, a step's result
// (dedup.Step), is encoded as JSON (dedup.JSONCodec).
type codec struct {
	maxSize int
	types   protoregistry.MessageTypeResolver
}

var _ dedup.Codec = codec{}

// Marshal encodes a *reply. A response that is not a proto message, or is
// larger than maxSize, is kept as a "not kept" record saying so, which
// completes the key: the handler never reruns for it.
func (c codec) Marshal(v any) ([]byte, error) {
	r, ok := v.(*reply)
	switch {
	case !ok:
		return dedup.JSONCodec{}.Marshal(v)
	case r == nil:
		return nil, fmt.Errorf("dedupgrpc: cannot keep a %T", v)
	}
	switch {
	case r.err != nil:
		body, err := proto.Marshal(r.err.Proto())
		if err != nil {
			return nil, err
		}
		if len(body) > c.maxSize {
			return notKept(fmt.Sprintf("the kept error is %d bytes, over the limit of %d", len(body), c.maxSize)), nil
		}
		return append([]byte{kindError}, body...), nil
	case r.notKept != "":
		return notKept(r.notKept), nil
	}
	m, ok := r.resp.(proto.Message)
	if !ok || m == nil {
		return notKept(fmt.Sprintf("the response is a %T, not a proto message", r.resp)), nil
	}
	size := proto.Size(m)
	if size > c.maxSize {
		return notKept(fmt.Sprintf("the response is %d bytes, over the limit of %d", size, c.maxSize)), nil
	}
	name := m.ProtoReflect().Descriptor().FullName()
	buf := make([]byte, 0, 1+binary.MaxVarintLen64+len(name)+size)
	buf = append(buf, kindResponse)
	buf = binary.AppendUvarint(buf, uint64(len(name)))
	buf = append(buf, name...)
	return proto.MarshalOptions{}.MarshalAppend(buf, m)
}

func notKept(reason string) []byte {
	return append([]byte{kindNotKept}, reason...)
}

// Unmarshal decodes a kept record into the *reply v points to.
func (c codec) Unmarshal(data []byte, v any) error {
	out, ok := v.(**reply)
	if !ok {
		return dedup.JSONCodec{}.Unmarshal(data, v)
	}
	if len(data) == 0 {
		return errors.New("dedupgrpc: empty record")
	}
	r := &reply{}
	switch data[0] {
	case kindNotKept:
		r.notKept = string(data[1:])
	case kindError:
		var st spb.Status
		if err := proto.Unmarshal(data[1:], &st); err != nil {
			return fmt.Errorf("dedupgrpc: kept error: %w", err)
		}
		r.err = status.FromProto(&st)
	case kindResponse:
		n, w := binary.Uvarint(data[1:])
		if w <= 0 || uint64(len(data)-1-w) < n {
			return errors.New("dedupgrpc: kept response with a bad type name")
		}
		name := protoreflect.FullName(data[1+w : 1+w+int(n)])
		mt, err := c.types.FindMessageByName(name)
		if err != nil && c.types != protoregistry.GlobalTypes {
			mt, err = protoregistry.GlobalTypes.FindMessageByName(name)
		}
		if err != nil {
			return fmt.Errorf("dedupgrpc: kept response of type %s: %w (register it, or set Options.Types)", name, err)
		}
		m := mt.New().Interface()
		if err := proto.Unmarshal(data[1+w+int(n):], m); err != nil {
			return fmt.Errorf("dedupgrpc: kept response of type %s: %w", name, err)
		}
		r.resp = m
	default:
		return fmt.Errorf("dedupgrpc: kept record of unknown kind %d", data[0])
	}
	*out = r
	return nil
}
