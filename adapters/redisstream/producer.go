package dedupredisstream

import (
	"cmp"
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/outbox"
)

// ProducerOptions configure a Producer. A nil *ProducerOptions means all
// defaults.
type ProducerOptions struct {
	// DataField and IDField name the fields of the body and of the message
	// id, as the consumers' Options do. Default to "data" and
	// "message-id".
	DataField, IDField string
	// MaxLen trims the stream to about this many entries on each add
	// (MAXLEN ~). Trimming deletes entries a consumer group may not have
	// acknowledged yet: the Consumer reports those (Stats().Trimmed), but
	// they are lost. Defaults to 0: no trimming.
	MaxLen int64
	// Injector writes the trace context of the add's context into the
	// entry's fields (a delivery.Injector such as dedupotel's Observer).
	// Defaults to none.
	Injector delivery.Injector
}

// Producer adds entries to a stream with the message id field stamped, so
// that every copy of a message (a producer retrying an add whose reply it
// did not get) carries the same id, which the consumers' receivers key on
// (idstrategy.MessageID).
type Producer struct {
	client redis.UniversalClient
	stream string
	opts   ProducerOptions
}

// NewProducer returns a Producer adding to stream; opts may be nil. client
// stays the caller's.
func NewProducer(client redis.UniversalClient, stream string, opts *ProducerOptions) (*Producer, error) {
	switch {
	case client == nil:
		return nil, wrapConfig("client is nil")
	case stream == "":
		return nil, wrapConfig("stream is empty")
	}
	var o ProducerOptions
	if opts != nil {
		o = *opts
	}
	o.DataField = cmp.Or(o.DataField, defaultDataField)
	o.IDField = cmp.Or(o.IDField, defaultIDField)
	if o.DataField == o.IDField {
		return nil, wrapConfig("DataField and IDField are both %q", o.DataField)
	}
	if o.MaxLen < 0 {
		return nil, wrapConfig("MaxLen is %d; it must be positive", o.MaxLen)
	}
	return &Producer{client: client, stream: stream, opts: o}, nil
}

// Add adds one entry: data in the data field, id in the id field (a new
// outbox.NewMessageID when id is empty), and fields as fields of their own
// (neither may be named as those two). It returns the entry's id and the
// message id. Call it again with the returned message id when the add's
// outcome is unknown (a timeout): the consumers answer the second entry as
// a duplicate.
func (p *Producer) Add(ctx context.Context, id string, data []byte, fields map[string]string) (entryID, messageID string, err error) {
	if id == "" {
		id = outbox.NewMessageID()
	}
	values := make([]any, 0, 4+2*len(fields))
	values = append(values, p.opts.IDField, id, p.opts.DataField, data)
	for k, v := range fields {
		if k == p.opts.IDField || k == p.opts.DataField {
			return "", id, wrapConfig("field %q is the id or data field", k)
		}
		values = append(values, k, v)
	}
	if p.opts.Injector != nil {
		p.opts.Injector.Inject(ctx, func(k, v string) {
			if k != p.opts.IDField && k != p.opts.DataField {
				values = append(values, k, v)
			}
		})
	}
	args := &redis.XAddArgs{Stream: p.stream, Values: values}
	if p.opts.MaxLen > 0 {
		args.MaxLen, args.Approx = p.opts.MaxLen, true
	}
	entryID, err = p.client.XAdd(ctx, args).Result()
	if err != nil {
		return "", id, fmt.Errorf("dedupredisstream: add to %q: %w", p.stream, err)
	}
	return entryID, id, nil
}
