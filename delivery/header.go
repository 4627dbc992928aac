package delivery

import "iter"

// Header is a message's headers behind one lookup API, whatever the
// broker's header type (nats.Header, amqp091.Table, []kafka.Header). Each
// adapter wraps its broker's headers without copying them.
//
// Names are matched exactly, case included: that is what AMQP, Kafka and
// current NATS clients do. Values that are not strings on the wire (AMQP
// numbers, Kafka bytes) are given as their text.
type Header interface {
	// Get returns the first value of the named header and whether it is
	// present.
	Get(name string) (string, bool)
	// All yields every header name and value, a name once per value, in the
	// broker's order where it keeps one.
	All() iter.Seq2[string, string]
}

// MapHeader is a Header held in a map of names to values, the shape of
// nats.Header and http.Header (converting either costs nothing). Lookups are
// exact: MapHeader does not canonicalise names the way http.Header.Get does.
type MapHeader map[string][]string

// Get returns the first value of name.
func (h MapHeader) Get(name string) (string, bool) {
	vs := h[name]
	if len(vs) == 0 {
		return "", false
	}
	return vs[0], true
}

// All yields every name and value; map order is random.
func (h MapHeader) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for k, vs := range h {
			for _, v := range vs {
				if !yield(k, v) {
					return
				}
			}
		}
	}
}

var _ Header = MapHeader(nil)
