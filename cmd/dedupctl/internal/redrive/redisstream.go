package redrive

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup/delivery"
)

// RedisStreamConfig says where a Redis Streams source reads.
type RedisStreamConfig struct {
	// Client is the Redis (single, Sentinel or Cluster) that holds the
	// dead-letter stream and the streams its letters came from. The
	// source owns it: Close closes it, and so does a NewRedisStream that
	// fails.
	Client redis.UniversalClient
	// Where names the Redis in errors: its address.
	Where string
	// Stream is the dead-letter stream.
	Stream string
	// DataField is the field that holds the body (dedupredisstream's
	// Options.DataField). Defaults to "data".
	DataField string
	// IDField is the field that holds the message id (dedupredisstream's
	// Options.IDField). Defaults to "message-id". A copy whose letter lost
	// it gets it back from Dedup-Original-Message-Id.
	IDField string
}

// redisStreamPage is how many letters one XRANGE reads.
const redisStreamPage = 100

// RedisStream reads the dead letters of a dedupredisstream Consumer (a
// Redis stream of its own, Options.DeadLetterStream) by entry id, from the
// first to the last the stream held when the pass began (XRANGE, no
// consumer group: a group reading the dead-letter stream is left alone).
//
// A copy is added (XADD) to the stream the letter names (Dedup-Stream, or
// Dedup-Source), with the original's fields (its data and message id
// fields among them) and none of the Dedup-* ones; the XADD's reply is the
// confirm. NOMKSTREAM: a stream that does not exist (deleted, or a typo)
// refuses the copy rather than being created by it. The copy is a new entry
// with an id of its own, which the consumer group reads as new: the
// original's message id is what makes a second copy (a run stopped between
// the XADD and the XDEL, then run again) a duplicate to the receiver.
// Once the copy was added, the letter is deleted from the dead-letter
// stream (XDEL).
type RedisStream struct {
	client    redis.UniversalClient
	where     string
	stream    string
	dataField string
	idField   string
	next      string // the id the next XRANGE starts from, exclusive
	last      string // the last id the stream held when the pass began
	page      []redis.XMessage
	size      int64
	done      bool
}

var _ Source = (*RedisStream)(nil)

// redisLetter is what a Redis Streams letter keeps for republishing and
// removal.
type redisLetter struct {
	m      redis.XMessage
	names  []string // the fields, in the letter's order
	values []string
	stream string // where the copy goes
}

// NewRedisStream begins a pass over cfg.Stream. A stream that does not
// exist (or a key that is not a stream) fails matching ErrNotFound.
func NewRedisStream(ctx context.Context, cfg RedisStreamConfig) (_ *RedisStream, err error) {
	defer func() {
		if err != nil {
			_ = cfg.Client.Close()
		}
	}()
	r := &RedisStream{client: cfg.Client, where: cmp.Or(cfg.Where, "Redis"), stream: cfg.Stream,
		dataField: cmp.Or(cfg.DataField, "data"), idField: cmp.Or(cfg.IDField, "message-id"), next: "-"}
	kind, err := cfg.Client.Type(ctx, cfg.Stream).Result()
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: %w", r.where, err)
	case kind == "none":
		return nil, fmt.Errorf("%s: %w: stream %q", r.where, ErrNotFound, cfg.Stream)
	case kind != "stream":
		return nil, fmt.Errorf("%s: %w: %q is a %s, not a stream", r.where, ErrNotFound, cfg.Stream, kind)
	}
	// The last entry and the length, read together: the pass ends at
	// that entry.
	var last *redis.XMessageSliceCmd
	var length *redis.IntCmd
	if _, err := cfg.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		last = p.XRevRangeN(ctx, cfg.Stream, "+", "-", 1)
		length = p.XLen(ctx, cfg.Stream)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("%s: stream %q: %w", r.where, cfg.Stream, err)
	}
	if len(last.Val()) == 0 {
		r.done = true
		return r, nil
	}
	r.last, r.size = last.Val()[0].ID, length.Val()
	return r, nil
}

// Next returns the next letter, reading a page of them at a time.
func (r *RedisStream) Next(ctx context.Context) (*Letter, error) {
	if len(r.page) == 0 {
		if r.done {
			return nil, ErrEnd
		}
		start := r.next
		if start != "-" {
			start = "(" + start
		}
		msgs, err := r.client.XRangeN(ctx, r.stream, start, r.last, redisStreamPage).Result()
		if err != nil {
			return nil, fmt.Errorf("%s: stream %q: %w", r.where, r.stream, err)
		}
		if len(msgs) < redisStreamPage {
			r.done = true
		}
		if len(msgs) == 0 {
			return nil, ErrEnd
		}
		r.page = msgs
		r.next = msgs[len(msgs)-1].ID
	}
	m := r.page[0]
	r.page = r.page[1:]
	return r.letterOf(m), nil
}

// letterOf reads a letter's fields (go-redis gives them as a map: the
// letter's order is lost, which a stream entry's reader never relies on).
func (r *RedisStream) letterOf(m redis.XMessage) *Letter {
	rl := redisLetter{m: m}
	h := delivery.MapHeader{}
	for k, v := range m.Values {
		s := fieldString(v)
		rl.names = append(rl.names, k)
		rl.values = append(rl.values, s)
		h[k] = []string{s}
	}
	get := func(name string) string {
		v, _ := delivery.LookupHeader(h, name)
		return v
	}
	l := &Letter{
		ID:     m.ID,
		Time:   entryTime(m.ID),
		Header: func(name string) (string, bool) { return h.Get(name) },
	}
	if body, ok := h.Get(r.dataField); ok {
		l.Body = []byte(body)
	}
	l.MessageID = get(delivery.HeaderOriginalMessageID)
	if l.MessageID == "" {
		l.MessageID, _ = h.Get(r.idField)
	}
	if at, err := time.Parse(time.RFC3339Nano, get(delivery.HeaderDeadLetteredAt)); err == nil {
		l.Time = at
	}
	if l.Reason = get(delivery.HeaderReason); l.Reason != "" {
		l.Marking = ByAdapter
		l.Key = get(delivery.HeaderKey)
		l.Error = get(delivery.HeaderError)
		rl.stream = cmp.Or(get(delivery.HeaderStream), get(delivery.HeaderSource))
		if rl.stream != "" {
			l.To = "stream " + rl.stream
		}
	}
	l.handle = rl
	return l
}

func fieldString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

// entryTime is the time in an entry id: when Redis added it.
func entryTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

// Republish adds the original's fields to its stream (XADD NOMKSTREAM);
// the reply is the confirm.
func (r *RedisStream) Republish(ctx context.Context, l *Letter) error {
	rl := l.handle.(redisLetter)
	values := r.restoredFields(rl)
	err := r.client.XAdd(ctx, &redis.XAddArgs{Stream: rl.stream, NoMkStream: true, Values: values}).Err()
	switch {
	case errors.Is(err, redis.Nil):
		return fmt.Errorf("%w: stream %q does not exist", ErrRefused, rl.stream)
	case err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE"):
		return fmt.Errorf("%w: %q is not a stream: %w", ErrRefused, rl.stream, err)
	case err != nil:
		return fmt.Errorf("%s: %w", r.where, err)
	}
	return nil
}

// restoredFields are the original's fields: the letter's without the
// Dedup-* ones, with the message id field back from
// Dedup-Original-Message-Id when the letter lost it.
func (r *RedisStream) restoredFields(rl redisLetter) []any {
	out := make([]any, 0, 2*len(rl.names)+2)
	hasID := false
	original := ""
	for i, n := range rl.names {
		if hasPrefixFold(n, "Dedup-") {
			if _, ok := delivery.LookupHeader(delivery.MapHeader{n: {rl.values[i]}}, delivery.HeaderOriginalMessageID); ok {
				original = rl.values[i]
			}
			continue
		}
		if n == r.idField {
			hasID = true
		}
		out = append(out, n, rl.values[i])
	}
	if !hasID && original != "" {
		out = append(out, r.idField, original)
	}
	return out
}

// Remove deletes the letter from the dead-letter stream (XDEL); one
// deleted meanwhile (a run beside this one) is removed already.
func (r *RedisStream) Remove(ctx context.Context, l *Letter) error {
	if err := r.client.XDel(ctx, r.stream, l.ID).Err(); err != nil {
		return fmt.Errorf("%s: XDEL %s %s: %w", r.where, r.stream, l.ID, err)
	}
	return nil
}

// Leave does nothing: the letter stays in the stream.
func (r *RedisStream) Leave(context.Context, *Letter) error { return nil }

// Size is the stream's length when the pass began.
func (r *RedisStream) Size() int64 { return r.size }

// Close closes the client.
func (r *RedisStream) Close(context.Context) error { return r.client.Close() }
