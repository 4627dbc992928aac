package deduphttp

import (
	"encoding/binary"
	"errors"
	"net/http"

	"github.com/dedup-go/dedup"
)

// response is a captured response: the result the receiver stores and
// replays.
type response struct {
	status int
	// notKept: the body was over the cap and was not stored; a replay
	// answers that the original response was too large to keep.
	notKept bool
	// live is the header map of the original response, which the codec
	// filters through the allowlist while encoding (nothing is copied).
	live http.Header
	// fields are the stored headers of a decoded response.
	fields []field
	// body aliases the capture buffer (original) or the stored bytes
	// (replay): the store's records are immutable, so a replay copies
	// nothing.
	body []byte
}

type field struct {
	name   string
	values []string
}

// codec encodes a response compactly for the store:
//
//	version (1 byte), flags (1 byte: 1 = body not kept), status (uvarint),
//	header count (uvarint), per header: name, value count (uvarint), values
//	(each uvarint length and bytes), then the body to the end.
//
// Only the headers of allow are kept, in allow's order. Any other value,
// a step's result (dedup.Step), is encoded as JSON (dedup.JSONCodec).
type codec struct {
	allow []string // canonical names
}

const (
	codecVersion = 1
	flagNotKept  = 1
)

var errCorrupt = errors.New("deduphttp: stored response is corrupt")

// Marshal encodes a response (given as response or *response).
func (c *codec) Marshal(v any) ([]byte, error) {
	var r *response
	switch x := v.(type) {
	case response:
		r = &x
	case *response:
		r = x
	default:
		return dedup.JSONCodec{}.Marshal(v)
	}
	size := 2 + binary.MaxVarintLen64*2 + len(r.body)
	for _, name := range c.allow {
		if vs := r.live[name]; len(vs) > 0 {
			size += 2*binary.MaxVarintLen64 + len(name)
			for _, s := range vs {
				size += binary.MaxVarintLen64 + len(s)
			}
		}
	}
	out := make([]byte, 0, size)
	flags := byte(0)
	if r.notKept {
		flags |= flagNotKept
	}
	out = append(out, codecVersion, flags)
	out = binary.AppendUvarint(out, uint64(r.status))
	n := 0
	for _, name := range c.allow {
		if len(r.live[name]) > 0 {
			n++
		}
	}
	out = binary.AppendUvarint(out, uint64(n))
	for _, name := range c.allow {
		vs := r.live[name]
		if len(vs) == 0 {
			continue
		}
		out = appendString(out, name)
		out = binary.AppendUvarint(out, uint64(len(vs)))
		for _, s := range vs {
			out = appendString(out, s)
		}
	}
	if !r.notKept {
		out = append(out, r.body...)
	}
	return out, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Unmarshal decodes data into a *response. The body aliases data; the
// header names and values share one string.
func (c *codec) Unmarshal(data []byte, v any) error {
	r, ok := v.(*response)
	if !ok {
		return dedup.JSONCodec{}.Unmarshal(data, v)
	}
	if len(data) < 2 || data[0] != codecVersion {
		return errCorrupt
	}
	d := decoder{data: data, pos: 2}
	status := d.uvarint()
	nf := d.uvarint()
	if d.err != nil || status < 100 || status > 999 || nf > uint64(len(data)) {
		return errCorrupt
	}
	// One pass to count the values, so that all of them share one slice.
	start, nv := d.pos, 0
	for range nf {
		d.str()
		k := d.uvarint()
		if k > uint64(len(data)) {
			return errCorrupt
		}
		for range k {
			d.str()
		}
		nv += int(k)
	}
	if d.err != nil {
		return errCorrupt
	}
	strs := string(data[start:d.pos])
	body := data[d.pos:]
	*r = response{status: int(status), notKept: data[1]&flagNotKept != 0, body: body}
	if nf == 0 {
		return nil
	}
	fields := make([]field, nf)
	values := make([]string, nv)
	d = decoder{data: data, pos: start}
	sub := func(off, n int) string { return strs[off-start : off-start+n] }
	for i := range fields {
		off, n := d.strPos()
		fields[i].name = sub(off, n)
		k := int(d.uvarint())
		vs := values[:k:k]
		values = values[k:]
		for j := range vs {
			off, n := d.strPos()
			vs[j] = sub(off, n)
		}
		fields[i].values = vs
	}
	r.fields = fields
	return nil
}

// decoder reads uvarints and length-prefixed strings; the first error
// sticks.
type decoder struct {
	data []byte
	pos  int
	err  error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.data[d.pos:])
	if n <= 0 {
		d.err = errCorrupt
		return 0
	}
	d.pos += n
	return v
}

func (d *decoder) strPos() (off, n int) {
	l := d.uvarint()
	if d.err != nil || l > uint64(len(d.data)-d.pos) {
		d.err = errCorrupt
		return d.pos, 0
	}
	off = d.pos
	d.pos += int(l)
	return off, int(l)
}

func (d *decoder) str() { d.strPos() }
