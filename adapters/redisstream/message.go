package dedupredisstream

import (
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
)

// BrokerRedisStream is the value of dedup.Message.Broker and
// delivery.Event.Broker for entries of this package.
const BrokerRedisStream = "redisstream"

// ReasonTrimmed is the reason of the event of a pending entry deleted from
// the stream before its outcome was recorded (ErrTrimmed).
const ReasonTrimmed delivery.Reason = "trimmed"

// Native returns the stream entry m was filled from, and false when m did
// not come from a [Consumer]. Read it (its ID, its fields); do not XACK it:
// the Consumer acknowledges every entry once its outcome is recorded.
func Native[T any](m *dedup.Message[T]) (redis.XMessage, bool) {
	if m == nil {
		return redis.XMessage{}, false
	}
	x, ok := m.Native.(redis.XMessage)
	return x, ok
}

// EntryID returns the stream entry id of m ("1700000000000-0"), and ""
// when m did not come from a [Consumer].
func EntryID[T any](m *dedup.Message[T]) string {
	x, _ := Native(m)
	return x.ID
}

// fields are an entry's fields as strings, in the order Redis gave them
// where the reply kept one.
type fields struct {
	names, values []string
}

func (f *fields) Get(name string) (string, bool) {
	for i, n := range f.names {
		if n == name {
			return f.values[i], true
		}
	}
	return "", false
}

func (f *fields) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for i, n := range f.names {
			if !yield(n, f.values[i]) {
				return
			}
		}
	}
}

// fieldsOf returns the fields of an entry's values (strings, as go-redis
// reads them); nil for an entry read back without fields (deleted).
func fieldsOf(values map[string]any) *fields {
	if values == nil {
		return nil
	}
	f := &fields{names: make([]string, 0, len(values)), values: make([]string, 0, len(values))}
	for k, v := range values {
		f.names = append(f.names, k)
		f.values = append(f.values, toString(v))
	}
	return f
}

func toString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case nil:
		return ""
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return ""
}

// idTime is the time in an entry id: when Redis added the entry (unless
// the producer chose the id).
func idTime(id string) time.Time {
	ms, _, ok := strings.Cut(id, "-")
	if !ok {
		return time.Time{}
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

// validID reports whether s is an entry id ("ms-seq" or "ms").
func validID(s string) bool {
	ms, seq, found := strings.Cut(s, "-")
	if _, err := strconv.ParseUint(ms, 10, 64); err != nil {
		return false
	}
	if found {
		if _, err := strconv.ParseUint(seq, 10, 64); err != nil {
			return false
		}
	}
	return true
}

// message is the envelope of an entry.
func (c *Consumer[T, R]) message(e *entry) *dedup.Message[T] {
	m := &dedup.Message[T]{
		Source:          c.stream,
		Stream:          c.stream,
		DeliveryCount:   e.count,
		Redelivered:     e.count > 1,
		Timestamp:       idTime(e.id),
		Broker:          BrokerRedisStream,
		Native:          redis.XMessage{ID: e.id, Values: e.values},
		FingerprintData: c.opts.Fingerprint,
	}
	if e.fields != nil && len(e.fields.names) > 0 {
		m.Header = e.fields
		if data, ok := e.fields.Get(c.opts.DataField); ok {
			m.Data = []byte(data)
		}
		m.ID, _ = e.fields.Get(c.opts.IDField)
	}
	return m
}

var _ delivery.Header = (*fields)(nil)
