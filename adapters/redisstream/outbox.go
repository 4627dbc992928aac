package dedupredisstream

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup/outbox"
)

// ErrPublisherClosed: Publish was called after Close.
var ErrPublisherClosed = errors.New("dedupredisstream: outbox publisher closed")

// OutboxOptions configure an OutboxPublisher. A nil *OutboxOptions means
// all defaults.
type OutboxOptions struct {
	// DataField and IDField name the fields of the body and of the message
	// id, as the consumers' Options do. Default to "data" and
	// "message-id".
	DataField, IDField string
}

// OutboxPublisher is the outbox.Publisher of Redis Streams: each message is
// added (XADD) to the stream its Destination names, with its ID in the id
// field (where the next consumer's idstrategy.MessageID finds it), its Body
// in the data field and its Header as fields of their own. The XADD's reply
// (the new entry's id) is the acknowledgement: Redis answers once the entry
// is in the stream. The messages of one Publish go in one pipeline. A
// message added twice (a relay publishing again after a lost reply) is two
// entries with one id, which the consumers' receivers answer once.
//
// The client stays the caller's: Close does not close it.
type OutboxPublisher struct {
	client redis.UniversalClient
	opts   OutboxOptions

	mu       sync.Mutex
	closed   bool
	inFlight sync.WaitGroup
}

var _ outbox.Publisher = (*OutboxPublisher)(nil)

// NewOutboxPublisher returns an OutboxPublisher on client; opts may be nil.
func NewOutboxPublisher(client redis.UniversalClient, opts *OutboxOptions) (*OutboxPublisher, error) {
	if client == nil {
		return nil, wrapConfig("client is nil")
	}
	var o OutboxOptions
	if opts != nil {
		o = *opts
	}
	o.DataField = cmp.Or(o.DataField, defaultDataField)
	o.IDField = cmp.Or(o.IDField, defaultIDField)
	if o.DataField == o.IDField {
		return nil, wrapConfig("DataField and IDField are both %q", o.DataField)
	}
	return &OutboxPublisher{client: client, opts: o}, nil
}

// Publish adds msgs, each to its Destination stream, in one pipeline, and
// returns once Redis replied to each (see outbox.Publisher). A message
// without a Destination fails alone, matching outbox.ErrPermanent.
func (p *OutboxPublisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrPublisherClosed
	}
	p.inFlight.Add(1)
	p.mu.Unlock()
	defer p.inFlight.Done()
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	errs := make([]error, len(msgs))
	cmds := make([]*redis.StringCmd, len(msgs))
	_, perr := p.client.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for i, m := range msgs {
			if strings.TrimSpace(m.Destination) == "" {
				errs[i] = outbox.Permanent(errors.New("dedupredisstream: outbox message without a Destination stream"))
				continue
			}
			values := make([]any, 0, 4+2*len(m.Header))
			for k, v := range m.Header {
				if k != p.opts.IDField && k != p.opts.DataField {
					values = append(values, k, v)
				}
			}
			values = append(values, p.opts.IDField, m.ID, p.opts.DataField, m.Body)
			cmds[i] = pl.XAdd(ctx, &redis.XAddArgs{Stream: m.Destination, Values: values})
		}
		return nil
	})
	failed := false
	for i, cmd := range cmds {
		if cmd != nil {
			errs[i] = cmd.Err()
		}
		failed = failed || errs[i] != nil
	}
	switch {
	case !failed:
		return nil
	case perr != nil && allFailed(errs):
		return perr
	}
	return &outbox.BatchError{Errs: errs}
}

func allFailed(errs []error) bool {
	for _, err := range errs {
		if err == nil {
			return false
		}
	}
	return true
}

// Close refuses further Publish calls and waits for those in flight, up
// to ctx. It is idempotent.
func (p *OutboxPublisher) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		p.inFlight.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
