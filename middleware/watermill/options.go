package dedupwatermill

import (
	"cmp"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
)

// Defaults of Options, as the fields' documentation gives them.
const (
	// defaultMaxResultSize is the largest encoded set of produced messages
	// kept when Options.Config leaves MaxResultSize zero.
	defaultMaxResultSize = 1 << 20
	// defaultMaxHold is Options.MaxHold's default.
	defaultMaxHold = 10 * time.Second
)

// Options configures a Middleware. A nil *Options means every default; a
// zero field takes its default.
type Options struct {
	// Config configures the receiver under the middleware: Namespace (set
	// it, one per consuming service), Lease, Retention, MaxAttempts,
	// FailOpen, Backoff, StoreRetryDelay, StoreTimeout, MaxIDLength,
	// Logger, Observer, Clock. Codec must be nil: produced messages are
	// kept in the middleware's own encoding. MaxResultSize is the largest
	// encoded set of produced messages kept for duplicates (see the package
	// documentation). Defaults to nil: the receiver's defaults, with
	// MaxResultSize 1 MiB.
	Config *dedup.Config

	// Key finds a message's id: FromUUID, FromMetadata, PayloadHash, a
	// func of yours, or any composition of them with package idstrategy
	// (idstrategy.FirstOf(FromMetadata("order_id"), FromUUID()), say). A
	// message without an id (an error matching dedup.ErrNoKey) or with an
	// invalid one is poison. Defaults to FromUUID(): the message's UUID.
	Key dedup.KeyFunc[*message.Message]

	// Scope returns the part of a message's record id that keeps apart the
	// same id consumed for different purposes: two handlers of one router
	// that both receive a message with one UUID (a handler that forwards
	// messages as they are, say). Defaults to the topic the handler
	// subscribes to (message.SubscribeTopicFromCtx); return "" for no
	// scope (the id alone, for a Namespace per consumer).
	Scope func(msg *message.Message) string

	// MaxHold bounds how long one delivery is held in the handler before
	// it is nacked: a message whose key is in flight elsewhere, or that
	// cannot be claimed because the store is down, is looked at again in
	// place after the receiver's delay (about 200 ms, doubling, up to the
	// holder's remaining lease; StoreRetryDelay), and a handler error
	// waits out the receiver's Backoff before the nack, so that a broker
	// that redelivers a nacked message at once (watermill-amqp does) is
	// never spun. Keep it below your broker's own limit for an
	// unacknowledged message (RabbitMQ's consumer_timeout, 30 min by
	// default). Defaults to 10s.
	MaxHold time.Duration

	// FingerprintPayload stores the SHA-256 of the first payload with the
	// record: a later message with the same id and another payload is
	// refused as poison (dedup.ErrKeyReused) instead of being answered with
	// the first one's produced messages. Defaults to false.
	FingerprintPayload bool
}

// settings is Options with its defaults filled.
type settings struct {
	Options
	cfg           dedup.Config
	maxResultSize int
	maxIDLength   int
}

func (o *Options) settings() (*settings, error) {
	s := &settings{}
	if o != nil {
		s.Options = *o
	}
	if s.Config != nil {
		s.cfg = *s.Config
	}
	if s.cfg.Codec != nil {
		return nil, fmt.Errorf("%w: dedupwatermill: Options.Config.Codec must be nil: the middleware keeps produced messages in its own encoding", dedup.ErrInvalidConfig)
	}
	if s.MaxHold < 0 {
		return nil, fmt.Errorf("%w: dedupwatermill: Options.MaxHold is %v; it must not be negative", dedup.ErrInvalidConfig, s.MaxHold)
	}
	s.MaxHold = cmp.Or(s.MaxHold, defaultMaxHold)
	if s.Key == nil {
		s.Key = FromUUID()
	}
	if s.Scope == nil {
		s.Scope = topicScope
	}
	if s.cfg.MaxResultSize < 0 || s.cfg.MaxIDLength < 0 {
		return s, nil // NewReceiver refuses them in its own words
	}
	s.maxResultSize = cmp.Or(s.cfg.MaxResultSize, defaultMaxResultSize)
	// The receiver's cap stays above ours, so that produced messages over
	// ours are kept as a small "not kept" record (see codec).
	s.cfg.MaxResultSize = s.maxResultSize + notKeptSlack
	s.maxIDLength = cmp.Or(s.cfg.MaxIDLength, adapter.DefaultMaxIDLength)
	return s, nil
}

// topicScope is the default Scope: the topic the handler subscribes to.
func topicScope(msg *message.Message) string {
	return message.SubscribeTopicFromCtx(msg.Context())
}
