package dedup

import "context"

// ConsumerStats counts what a broker adapter did with its deliveries: the
// same shape on NATS, RabbitMQ and Kafka, so that one dashboard serves
// every broker. A counter a broker has no use for stays zero.
type ConsumerStats struct {
	// Delivered counts the deliveries the broker handed the consumer.
	Delivered uint64
	// Acked counts deliveries acknowledged (committed, on Kafka) because
	// their effect happened: processed, duplicate, bypassed.
	Acked uint64
	// RetriedInPlace counts retries without a copy: held and handed to the
	// receiver again, or returned to the broker (nak, requeue).
	RetriedInPlace uint64
	// RetriedLater counts retries through a copy: a RabbitMQ retry tier, a
	// Kafka retry topic.
	RetriedLater uint64
	// DeadLettered counts dead letters the broker confirmed.
	DeadLettered uint64
	// PoisonDropped counts poison dropped on purpose (DropPoison).
	PoisonDropped uint64
	// SettleFailures counts acks, naks, commits, retries and dead letters
	// that failed; the broker redelivers such a delivery.
	SettleFailures uint64
	// Reconnects counts connections or sessions made again after a loss.
	Reconnects uint64
	// DeadLettersTruncated counts dead letters published as a cut copy:
	// the original was over what the dead-letter destination takes, so the
	// letter carries its headers and the first part of its data (NATS).
	DeadLettersTruncated uint64
	// SlowConsumerDropped counts messages the client dropped before they
	// reached the consumer because it fell behind: core NATS messages past
	// a subscription's pending limits (a slow consumer). Nothing delivers
	// them again and no event reports them: they are lost (NATS).
	SlowConsumerDropped uint64
	// StaleDeliveries counts deliveries that could no longer be settled
	// (of a closed channel, of a partition taken away): the broker
	// redelivers them.
	StaleDeliveries uint64
	// Trimmed counts entries the broker deleted while they were pending,
	// before their outcome was recorded: a Redis stream trimmed (MAXLEN,
	// MINID, XDEL) past entries a consumer group had not acknowledged.
	// They are lost; each is logged at error level with its id and
	// reported as an event (Redis Streams).
	Trimmed uint64
	// Lag is how many entries of the stream the consumer group has not
	// read yet, as the broker last said (Redis Streams' XINFO GROUPS lag);
	// -1 when the broker cannot tell (entries deleted from the middle of
	// the stream). A gauge, not a counter; 0 on other brokers.
	Lag int64
}

// inject writes the trace context of ctx through set when the Observer is
// a delivery.Injector (adapter.Receiver.Inject).
func (r *Receiver[M, R]) inject(ctx context.Context, set func(key, value string)) {
	if r.injector != nil {
		r.injector.Inject(ctx, set)
	}
}
