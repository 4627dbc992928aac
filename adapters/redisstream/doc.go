// Package dedupredisstream runs a dedup.Receiver over a consumer group of a
// Redis stream, on go-redis v9 (the client redisstore uses): [Consumer]. It
// also has a [Producer] that stamps each entry with its message id, and an
// [OutboxPublisher] for the outbox relays. Import it under its name:
//
//	import (
//		"github.com/redis/go-redis/v9"
//
//		"github.com/dedup-go/dedup"
//		dedupredisstream "github.com/dedup-go/dedup/adapters/redisstream"
//		"github.com/dedup-go/dedup/idstrategy"
//	)
//
//	rcv, err := dedup.NewReceiver(store, idstrategy.MessageID[Order](), charge, &dedup.Config{Namespace: "billing"})
//	c, err := dedupredisstream.NewConsumer(client, "orders", "billing", rcv,
//		&dedupredisstream.Options{CreateGroup: true, DeadLetterStream: "orders.dlq"})
//	err = c.Start(context.Background()) // the consumer's lifetime
//	...
//	err = c.Stop(stopCtx) // drains: finishes what was read
//
// The package is named dedupredisstream so that it shadows neither go-redis
// (redis) nor the store (redisstore): the folder, adapters/redisstream,
// prefixed with dedup, as dedupkafka and dedupnats are.
//
// # Streams are at-least-once
//
// A consumer group hands each entry to one consumer and keeps it pending
// until XACK. What Redis leaves to the consumers is what this package does:
//
//   - XACK only after the outcome is recorded (never on receipt), so a
//     crash leaves the entry pending, and the record makes its next
//     delivery a duplicate.
//   - An entry left pending by a consumer that died, or stalled, is taken
//     over (XAUTOCLAIM) once it was idle Options.ClaimIdle (the receiver's
//     lease by default), checked every ClaimInterval: a consumer killed
//     inside a handler costs its entries at most ClaimIdle plus
//     ClaimInterval. A live Consumer keeps the entries it holds (queued, in a
//     handler, waiting for a retry) from going idle (XCLAIM ... JUSTID every
//     quarter of ClaimIdle, for those idle half of it), so they are never
//     raced for while that upkeep keeps time. An entry that reaches two
//     consumers at once anyway (the holder's upkeep late by more than a
//     quarter of ClaimIdle: a pause of the process, Redis out of reach) is
//     answered by the store: in flight, or a duplicate; its handler runs
//     once.
//   - A group keeps no order per key across consumers: two entries of one
//     order may be handled at once by two consumers, or the second before
//     the first when the first is retried. Key on the message id; do not
//     rely on the stream's order.
//
// # Retries after a delay
//
// A failed entry (a handler error with attempts left, the store down under
// fail-closed, a key in flight elsewhere) is not acknowledged: it stays
// pending to this consumer, and is handed over again once the delay
// Decide gave has passed, by a timer of the consumer's (as fine as
// milliseconds; Options.MinRetryDelay at least). No second stream is
// needed. So that no consumer runs it before its delay, whatever
// ClaimIdle is, the next attempt's time is recorded in Redis before the
// delivery is settled: a hash of the group's (the stream's key,
// ":dedup-retry:", the group), by entry id, expiring with the receiver's
// retention. A consumer that takes the entry over (the holder died) reads
// it and waits until then, and the holder keeps the entry's idle time low
// meanwhile. Attempts are counted by the record (dedup.Config.MaxAttempts),
// not by Redis; the envelope's DeliveryCount is Redis's (XPENDING), plus
// the retries this consumer held.
//
// # Dead letters
//
// Poison (undecodable, no id, invalid id, key reused, a permanent error,
// attempts exhausted) is added to Options.DeadLetterStream (XADD), then
// the original is acknowledged, in that order: a crash between the two
// leaves the original pending, dead-lettered again (a second letter with
// the same original entry id and message id, which dedupctl redrive
// answers by the key's record). A dead letter holds the original's fields
// (the data and id fields among them), then those of package delivery:
// Dedup-Reason, Dedup-Error, Dedup-Key, Dedup-Attempt, Dedup-Source and
// Dedup-Stream (the stream's key), Dedup-Consumer-Group, Dedup-Offset (the
// original entry id), Dedup-Delivery-Count, Dedup-Original-Message-Id and
// Dedup-Dead-Lettered-At, and the delivery's trace context. A dead letter
// that cannot be added leaves the original pending, tried again after the
// receiver's StoreRetryDelay. Without DeadLetterStream, NewConsumer
// refuses, unless Options.DropPoison (each poison entry acknowledged,
// logged at error level, counted in Stats().PoisonDropped).
//
// # Trimming
//
// MAXLEN and MINID trimming (and XDEL) delete entries whether a group
// acknowledged them or not. An entry deleted while pending is lost, never
// silently: it is logged at error level with its id, counted in
// Stats().Trimmed, and the Observer hears an event whose Err matches
// ErrTrimmed, Decision.Reason ReasonTrimmed and Header's Dedup-Offset the
// entry id. Such entries are found three ways: in XAUTOCLAIM's third reply
// element (read with a raw command: go-redis's XAutoClaim drops it), read
// back without fields from the consumer's own pending list, or gone from
// the stream when a retry comes due. Each is reported by one consumer
// only (the step that finds it drops it from the pending list). An
// entry deleted while its handler runs is not lost: its outcome is
// recorded and the XACK ends it. Trim by MINID older than the longest a
// group may take (ClaimIdle plus the longest retry), or size MAXLEN well
// above the group's lag (Stats().Lag).
//
// # Consumers and lag
//
// Options.Consumer names the consumer in the group: the host name and the
// process id by default (a container's pod name and 1), stable across the
// restarts of one process, so that a restarted process takes its own
// pending entries back at once (XREADGROUP from 0), and unique across
// processes: Start refuses a name another live Consumer holds
// (ErrConsumerInUse; a lock key refreshed while the Consumer runs, which a
// crashed holder's restart waits out, 3 seconds at most). Consumers silent
// for Options.DeadConsumerIdle that own no pending entry are removed
// (XGROUP DELCONSUMER, in a script that checks in the same step that they
// own nothing), and a Consumer that stops owning nothing removes itself.
// Stats().Lag is the group's lag as XINFO GROUPS last said (every
// ClaimInterval; -1 when Redis cannot tell).
//
// # The envelope
//
//	Body, Data      the data field (Options.DataField, "data") decoded, and as added
//	Header          every field of the entry, the data and id fields included
//	ID              the id field (Options.IDField, "message-id"), which Producer and OutboxPublisher set
//	Source, Stream  the stream's key
//	DeliveryCount   1 for an entry read as new; Redis's count (XPENDING) for one taken over
//	Timestamp       the time in the entry id (when Redis added it)
//	Broker          "redisstream" (BrokerRedisStream)
//
// [Native] returns the redis.XMessage behind an envelope, [EntryID] its
// id. Offset stays 0: an entry id is two numbers.
//
// # Observing
//
// Each handing of an entry to the receiver is one delivery, and the
// receiver's dedup.Config.Observer hears it once, settled, as one
// delivery.Event (the OpenTelemetry module is such an Observer): Broker
// "redisstream", Source and Stream the stream, ConsumerGroup the group,
// ServerAddress and ServerPort the client's address (a *redis.Client's;
// unknown for a Cluster), DestinationTemplate Options.DestinationTemplate or
// the stream; and the decision carried out: Ack (XACK), Retry (the next
// attempt's time recorded, the entry kept pending), DeadLetter (XADD, then
// XACK), with SettleErr what failed. Trimmed entries are events too (see
// Trimming).
//
// Stats returns dedup.ConsumerStats: see [Consumer.Stats].
//
// # Outages
//
// go-redis reconnects by itself; a read that fails is tried again with a
// backoff up to a second, and a read that succeeds after failures counts
// in Stats().Reconnects. A store outage is the receiver's: fail-closed
// (the default), the entry is retried after StoreRetryDelay without running
// the handler; fail-open, the handler runs unprotected (Bypassed). An XACK
// that fails leaves the entry pending: it is handed over again (a
// duplicate, acknowledged then). A group gone (a Redis restarted without
// persistence) is created again with Options.CreateGroup, else the
// consumer stops (Err matches ErrStoppedUnasked and ErrNoGroup).
//
// # Redis Cluster
//
// A stream is one key; every command the Consumer sends names one key (its
// scripts take the stream's key alone), so a redis.ClusterClient works. The
// retry hash and the name lock are keys of their own, on whichever node
// holds them.
//
// # Ownership and lifecycle
//
// The client stays the caller's: the Consumer never closes it, nor deletes
// the stream or the group. Start starts Options.Concurrency workers, one
// reader (XREADGROUP, Batch entries at a time, blocking Block), one timer
// for retries and one maintainer (idle times, claims, lag, dead consumers).
// Stop stops reading, lets the workers finish the entries read, and
// returns; at ctx's deadline it cancels the handlers (their entries stay
// pending) and returns ctx's error. Entries waiting for a retry stay
// pending, for the next run or another consumer. A Start context that ends
// before Stop is a hard stop, logged at error level and reported by Err
// (ErrStoppedUnasked).
package dedupredisstream
