package dedupamqp

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedup-go/dedup/adapter"
)

// QueueType is the kind of queue Topology declares.
type QueueType string

// The queue types of RabbitMQ that a Consumer supports.
const (
	Classic QueueType = "classic"
	Quorum  QueueType = "quorum"
)

// Topology is a work queue with its dead-letter exchange and queue and its
// retry tiers, declared in one call by Declare. Declaring it again with the
// same values is a no-op; with other arguments for an existing queue, the
// broker refuses (PRECONDITION_FAILED), which is why a retry tier's delay
// is part of its queue's name.
type Topology struct {
	// Queue is the work queue's name. Required.
	Queue string
	// Type is the queue type of the work queue and its retry queues.
	// Defaults to Classic.
	Type QueueType
	// DeadLetterExchange is a durable direct exchange for dead letters.
	// The work queue names it as its x-dead-letter-exchange too (with
	// x-dead-letter-routing-key set to Queue), so that what the broker
	// dead-letters itself (a quorum queue's delivery limit, a message TTL,
	// a Reject with requeue=false) lands in the same place. Defaults to
	// Queue + ".dlx".
	DeadLetterExchange string
	// DeadLetterQueue is bound to DeadLetterExchange with Queue as its
	// binding key. Defaults to Queue + ".dlq".
	DeadLetterQueue string
	// RetryTiers are the delays of the retry queues: for each, a queue
	// named adapter.RetryName(Queue, delay) ("orders.retry.5s",
	// "orders.retry.1m30s") with that x-message-ttl whose dead-letter
	// exchange is the default exchange and routing key Queue, so that an
	// expired message goes back to the work queue. Each must be a whole
	// number of milliseconds. Defaults to none.
	//
	// dedupamqp 0.1 named the tiers by milliseconds ("orders.retry.5000ms";
	// the same name below a second). Such a queue, left in place, still
	// sends what it holds to the work queue as its TTL expires, so the
	// upgrade loses nothing; delete it once it is empty.
	RetryTiers []time.Duration
	// DeliveryLimit is a quorum queue's x-delivery-limit: after this many
	// returns (Reject with requeue, and, before RabbitMQ 4, Nack with
	// requeue or a lost consumer) the broker dead-letters the message.
	// Defaults to 0: the broker's default (none before RabbitMQ 4, 20
	// since).
	DeliveryLimit int
	// Arguments are further arguments of the work queue (x-max-length,
	// ...); the ones above take precedence. Defaults to none.
	Arguments amqp.Table
}

// Options returns Consumer options that match the topology: its dead-letter
// exchange, retry tiers and queue type. Set the rest on the result.
func (t Topology) Options() *Options {
	t = t.withDefaults()
	return &Options{DeadLetterExchange: t.DeadLetterExchange, DeadLetterRoutingKey: t.Queue, RetryTiers: t.RetryTiers, QueueType: t.Type}
}

func (t Topology) withDefaults() Topology {
	if t.Type == "" {
		t.Type = Classic
	}
	if t.DeadLetterExchange == "" {
		t.DeadLetterExchange = t.Queue + ".dlx"
	}
	if t.DeadLetterQueue == "" {
		t.DeadLetterQueue = t.Queue + ".dlq"
	}
	return t
}

func (t Topology) validate() error {
	switch {
	case t.Queue == "":
		return wrapConfig("Topology.Queue is empty")
	case t.Type != Classic && t.Type != Quorum:
		return wrapConfig("Topology.Type is %q; it must be %q or %q", t.Type, Classic, Quorum)
	case t.DeliveryLimit < 0:
		return wrapConfig("Topology.DeliveryLimit is %d; it must be positive", t.DeliveryLimit)
	case t.DeliveryLimit > 0 && t.Type != Quorum:
		return wrapConfig("Topology.DeliveryLimit is set on a %s queue; only quorum queues have one", t.Type)
	}
	for _, d := range t.RetryTiers {
		if d <= 0 || d%time.Millisecond != 0 {
			return wrapConfig("retry tier %v must be a positive whole number of milliseconds", d)
		}
	}
	return nil
}

// Declare declares the topology on ch: the dead-letter exchange and queue,
// the work queue and its retry queues, all durable. It is idempotent. A
// declaration the broker refuses closes ch (AMQP's rule); use a channel
// of its own. ch stays the caller's: Declare never closes it.
func (t Topology) Declare(ctx context.Context, ch *amqp.Channel) error {
	if ch == nil {
		return wrapConfig("channel is nil")
	}
	t = t.withDefaults()
	if err := t.validate(); err != nil {
		return err
	}
	typed := func(args amqp.Table) amqp.Table {
		args["x-queue-type"] = string(t.Type)
		return args
	}
	steps := []struct {
		what string
		do   func() error
	}{
		{"dead-letter exchange " + t.DeadLetterExchange, func() error {
			return ch.ExchangeDeclare(t.DeadLetterExchange, amqp.ExchangeDirect, true, false, false, false, nil)
		}},
		{"dead-letter queue " + t.DeadLetterQueue, func() error {
			_, err := ch.QueueDeclare(t.DeadLetterQueue, true, false, false, false, typed(amqp.Table{}))
			return err
		}},
		{"binding of " + t.DeadLetterQueue, func() error {
			return ch.QueueBind(t.DeadLetterQueue, t.Queue, t.DeadLetterExchange, false, nil)
		}},
		{"queue " + t.Queue, func() error {
			args := amqp.Table{}
			for k, v := range t.Arguments {
				args[k] = v
			}
			args["x-dead-letter-exchange"] = t.DeadLetterExchange
			args["x-dead-letter-routing-key"] = t.Queue
			if t.DeliveryLimit > 0 {
				args["x-delivery-limit"] = int64(t.DeliveryLimit)
			}
			_, err := ch.QueueDeclare(t.Queue, true, false, false, false, typed(args))
			return err
		}},
	}
	for _, d := range t.RetryTiers {
		name := adapter.RetryName(t.Queue, d)
		steps = append(steps, struct {
			what string
			do   func() error
		}{"retry queue " + name, func() error {
			_, err := ch.QueueDeclare(name, true, false, false, false, typed(amqp.Table{
				"x-message-ttl":             d.Milliseconds(),
				"x-dead-letter-exchange":    "",
				"x-dead-letter-routing-key": t.Queue,
			}))
			return err
		}})
	}
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.do(); err != nil {
			return fmt.Errorf("dedupamqp: declare %s: %w", s.what, err)
		}
	}
	return nil
}
