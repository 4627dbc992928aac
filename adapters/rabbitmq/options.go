package dedupamqp

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedup-go/dedup"
)

// Defaults of Options.
const (
	defaultConcurrency     = 8
	defaultInPlaceRetryMax = time.Second
	defaultSettleTimeout   = 10 * time.Second
	// defaultConsumerTimeout is RabbitMQ's default consumer_timeout: a
	// delivery left unacknowledged this long makes the broker close its
	// channel.
	defaultConsumerTimeout = 30 * time.Minute
)

// Dialer opens a connection to the broker. The Consumer calls it at Start
// and after every connection loss, twice per session: one connection to
// consume (and settle) on, one to publish retries and dead letters on, so
// that a broker blocking publishers during a resource alarm does not also
// hold back acknowledgements.
type Dialer func(ctx context.Context) (*amqp.Connection, error)

// DialURL returns a Dialer for url with amqp091's defaults: the Dialer to
// use unless TLS, a heartbeat or a client name of your own is needed (then
// write one around amqp.DialConfig). Never enable amqp.Config.Recovery for
// a Consumer's connections: recovery reuses the *Channel, whose delivery
// tags from before the loss would then acknowledge other messages.
func DialURL(url string) Dialer {
	return func(ctx context.Context) (*amqp.Connection, error) {
		return amqp.DialConfig(url, amqp.Config{
			Heartbeat: 10 * time.Second,
			Locale:    "en_US",
			Dial:      dialContext(ctx),
		})
	}
}

// Options configure a Consumer. A nil *Options means all defaults, but
// where poison messages go has no default: NewConsumer refuses options
// that set neither DeadLetterExchange nor DropPoison (nil among them) with
// an error naming both.
//
// There is no callback among them: each delivery is reported once, when
// settled, to the receiver's dedup.Config.Observer as a delivery.Event whose
// Broker is [BrokerRabbitMQ] and Source the queue (see Observing in the
// package documentation), and Consumer.Stats counts what was done.
type Options struct {
	// Concurrency is how many deliveries are handled at once. Defaults to 8.
	Concurrency int

	// Prefetch is the channel's Qos prefetch count (per channel, never
	// global): how many unacknowledged deliveries the broker hands out
	// ahead of the workers. Defaults to Concurrency.
	Prefetch int

	// DeadLetterExchange receives poison messages (undecodable, no id,
	// permanent errors, attempts exhausted, key reused), published with
	// confirms and mandatory, carrying the original body, properties and
	// headers plus the dedup-* headers of the package documentation; the
	// original is acknowledged only after the broker confirmed the dead
	// letter was routed. Start checks that the exchange exists. Set it or
	// DropPoison. Defaults to "": none.
	DeadLetterExchange string

	// DeadLetterRoutingKey is the routing key of dead letters. Defaults to
	// the queue's name.
	DeadLetterRoutingKey string

	// DropPoison, set instead of DeadLetterExchange, hands poison back to
	// the broker with Reject(requeue=false): the queue's own
	// x-dead-letter-exchange, if it has one (Topology declares one), takes
	// the message, and the broker adds x-death, which names the queue and
	// "rejected" but not dedup's reason (that reason is only in the
	// Observer's events and the logs; dedupctl redrive reads x-death). A
	// queue without an x-dead-letter-exchange drops the message. AMQP 0.9.1
	// cannot read a queue's arguments, so which of the two happens is not
	// checked. Defaults to false.
	DropPoison bool

	// QueueType is the type of the queue consumed, as Topology declares
	// it (Topology.Options sets it). Start logs which returns a quorum
	// queue counts towards its x-delivery-limit on the broker's version
	// only for a quorum queue, or one whose type is unknown (AMQP 0.9.1
	// cannot read a queue's type); a classic queue has no delivery limit.
	// Defaults to "": unknown.
	QueueType QueueType

	// RetryTiers are the delays of the retry queues declared for the queue
	// (see [Topology]; each is a queue named adapter.RetryName(queue,
	// delay), "orders.retry.5s"): a retry due later than
	// InPlaceRetryMax is republished, with confirms and mandatory, to the
	// shortest tier at least as long as its delay (the longest tier when
	// none is), and the original acknowledged once the broker confirmed it.
	// The queue's message TTL then brings it back. Start checks that every
	// tier's queue exists. Defaults to none: every retry is in place.
	RetryTiers []time.Duration

	// InPlaceRetryMax is the longest delay a retry is held for in place
	// before it is returned to the queue: the worker keeps the delivery
	// unacknowledged for its delay (at most this), then returns it:
	// Reject(requeue=true) after a handler failure (which RabbitMQ counts
	// towards a quorum queue's x-delivery-limit), Nack(requeue=true) when
	// the handler did not run (in flight elsewhere, shutdown; RabbitMQ
	// before 4.0 counts that too). A delivery refused because the store is
	// down is not returned: it is held and tried again in place every
	// StoreRetryDelay of the receiver, until ConsumerTimeout nears (see
	// ConsumerTimeout). Defaults to 1s.
	InPlaceRetryMax time.Duration

	// Decoder decodes the body into the handler's type. Defaults to
	// dedup.JSONDecoder (strict: an empty body or one that is not valid
	// UTF-8 is undecodable); dedup.RawDecoder hands []byte or string bodies
	// over as they are.
	Decoder dedup.Decoder

	// Fingerprint stores a SHA-256 of the body with each record, so that a
	// message carrying an id already used with another body is
	// dead-lettered as key-reused. Defaults to false.
	Fingerprint bool

	// ConsumerTimeout is the broker's consumer_timeout (AMQP 0.9.1 cannot
	// read it): a delivery left unacknowledged that long makes the broker
	// close its channel. Start checks that the receiver's lease plus
	// InPlaceRetryMax stays under it. While the store is down, a delivery
	// is held unacknowledged and tried again every StoreRetryDelay of the
	// receiver for as long as ConsumerTimeout allows: it is returned to
	// the queue (Nack, requeue) only when another wait would take it past
	// its arrival plus ConsumerTimeout, less the lease and InPlaceRetryMax.
	// The prefetch bounds how many deliveries are held. Set it to the
	// broker's value when that is not the default. Defaults to 30m,
	// RabbitMQ's default.
	ConsumerTimeout time.Duration

	// StrictHorizon makes Start fail with ErrHorizon when the lease does
	// not fit in ConsumerTimeout, or the receiver's retention is shorter
	// than the longest retry tier (a message parked there comes back after
	// its record expired). Defaults to false: a warning is logged.
	StrictHorizon bool

	// SettleTimeout bounds each dead-letter or retry publish and its
	// confirm. Defaults to 10s.
	SettleTimeout time.Duration

	// Dial opens the connections, at Start and after each loss. Defaults to
	// DialURL(url) of NewConsumer's url.
	Dial Dialer

	// ReconnectBackoff is the delay before reconnect attempt n (1 for the
	// first). Defaults to dedup.ExponentialBackoff{Base: 100ms, Max: 10s}.
	ReconnectBackoff dedup.Backoff

	// DestinationTemplate names the destination of every delivery by a
	// template, its form without ids (delivery.Origin.DestinationTemplate,
	// messaging.destination.template to dedupotel, which names the spans
	// after it and leaves the queue's name off the metrics when it
	// differs): for a queue whose name carries one. Defaults to none: a
	// queue's name is its own.
	DestinationTemplate string

	// Logger receives warnings (reconnects, failed acks and publishes, the
	// horizon check). Defaults to the receiver's logger.
	Logger *slog.Logger
}

// withDefaults returns the options with their defaults filled in.
func (o *Options) withDefaults(url string, logger *slog.Logger) Options {
	var out Options
	if o != nil {
		out = *o
	}
	out.Concurrency = cmp.Or(out.Concurrency, defaultConcurrency)
	out.Prefetch = cmp.Or(out.Prefetch, out.Concurrency)
	out.InPlaceRetryMax = cmp.Or(out.InPlaceRetryMax, defaultInPlaceRetryMax)
	out.SettleTimeout = cmp.Or(out.SettleTimeout, defaultSettleTimeout)
	out.ConsumerTimeout = cmp.Or(out.ConsumerTimeout, defaultConsumerTimeout)
	if out.Decoder == nil {
		out.Decoder = dedup.JSONDecoder{}
	}
	if out.Dial == nil && url != "" {
		out.Dial = DialURL(url)
	}
	if out.ReconnectBackoff == nil {
		out.ReconnectBackoff = dedup.ExponentialBackoff{Base: 100 * time.Millisecond, Max: 10 * time.Second}
	}
	out.RetryTiers = slices.Clone(out.RetryTiers)
	slices.Sort(out.RetryTiers)
	out.RetryTiers = slices.Compact(out.RetryTiers)
	out.Logger = cmp.Or(out.Logger, logger)
	return out
}

func (o *Options) validate() error {
	switch {
	case o.Concurrency < 0:
		return wrapConfig("Concurrency is %d; it must be positive", o.Concurrency)
	case o.Prefetch < 0 || o.Prefetch > 65535:
		return wrapConfig("Prefetch is %d; it must be between 1 and 65535", o.Prefetch)
	case o.InPlaceRetryMax < 0:
		return wrapConfig("InPlaceRetryMax is %v; it must be positive", o.InPlaceRetryMax)
	case o.SettleTimeout < 0:
		return wrapConfig("SettleTimeout is %v; it must be positive", o.SettleTimeout)
	case o.ConsumerTimeout < 0:
		return wrapConfig("ConsumerTimeout is %v; it must be positive", o.ConsumerTimeout)
	case o.Dial == nil:
		return wrapConfig("url is empty and Dial is nil: the consumer cannot connect; give a url or set Dial")
	case o.DeadLetterExchange == "" && !o.DropPoison:
		return wrapConfig("DeadLetterExchange is empty and DropPoison is false (nil options set neither): set DeadLetterExchange (Topology declares one) or DropPoison (rejected to the queue's own x-dead-letter-exchange, dropped without one); poison messages must go somewhere")
	case o.DeadLetterExchange != "" && o.DropPoison:
		return wrapConfig("DeadLetterExchange %q and DropPoison are both set; choose one", o.DeadLetterExchange)
	case len(o.RetryTiers) > 0 && o.RetryTiers[0] <= 0:
		return wrapConfig("RetryTiers holds %v; every tier must be positive", o.RetryTiers[0])
	}
	for _, d := range o.RetryTiers {
		if d%time.Millisecond != 0 {
			return wrapConfig("retry tier %v is not a whole number of milliseconds (x-message-ttl counts them)", d)
		}
	}
	return nil
}
