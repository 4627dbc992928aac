// Package dedupfranz runs a dedup.Receiver over a Kafka consumer group
// read with franz-go (github.com/twmb/franz-go/pkg/kgo) ([Consumer]). It
// is the Kafka adapter to choose for new services; dedupkafka, on
// segmentio/kafka-go, stays for those already on it (docs/kafka.md
// compares them).
//
//	charge := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) { ... }
//	rcv, err := dedup.NewReceiver(store, idstrategy.MessageHeader[Order](dedupfranz.HeaderMessageID), charge,
//		&dedup.Config{Namespace: "billing"})
//	c, err := dedupfranz.NewConsumer([]kgo.Opt{kgo.SeedBrokers(brokers...)}, "billing", []string{"orders"}, rcv,
//		&dedupfranz.Options{DeadLetterTopic: "orders.dlq"})
//	err = c.Start(context.Background()) // the consumer's life: a context that ends without Stop is a hard stop
//
//	<-sigCtx.Done()
//	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
//	defer cancel()
//	err = c.Stop(stopCtx) // stops polling, finishes what is in flight, commits, closes the client
//
// # Who builds the client
//
// The Consumer builds its kgo.Client from the caller's []kgo.Opt (seed
// brokers, TLS, SASL, timeouts, balancers, kgo.InstanceID, ...) and adds
// the group options it owns: kgo.ConsumerGroup, kgo.ConsumeTopics,
// kgo.DisableAutoCommit, kgo.BlockRebalanceOnPoll and its
// OnPartitionsAssigned, OnPartitionsRevoked and OnPartitionsLost. The
// callbacks are options fixed when a client is built, and they are the
// Consumer's whole grip on a rebalance: they must reach the Consumer's
// partitions, workers and committer, which do not exist before the
// Consumer does. A client the caller built could only carry callbacks the
// caller wired to a Consumer made beforehand, and the Consumer could check
// through Client.OptValue that callbacks are set, but not that they are its
// own. So the caller gives options, and NewConsumer refuses those that set
// what the Consumer owns (ErrClientConfig). The client is the Consumer's:
// Stop closes it.
//
// # Rebalances
//
// kgo's default balancer, cooperative-sticky, is kept unless the options
// choose another (kgo.Balancers; an eager one works too, revoking
// everything at each rebalance). The callbacks do what they are for:
//
//   - OnPartitionsAssigned: each assigned partition gets a worker and a
//     queue of its own (an assignment of a partition is new each time:
//     nothing of an earlier one reaches it).
//   - OnPartitionsRevoked: no record of a revoked partition starts a
//     handler from then on (its queue is dropped, a retry wait in place
//     ends at once: a rebalance never waits for a handler waiting on a
//     lease); the handlers running on it get up to Options.RevokeTimeout
//     to finish; then what is done is committed, with the member's
//     generation (CommitOffsetsSync), and the partition leaves the set
//     the committer commits. A handler still running goes on under its
//     lease, and its outcome is recorded in the store but not committed by
//     this member: the next owner finds the record done, or in flight.
//   - OnPartitionsLost: the partitions are fenced alike, and nothing is
//     committed for them (the member is out of the group; another may own
//     them already).
//
// Commits are serialised with the changes of ownership, so no commit of
// this member names a partition once its revoke or loss was handled; each
// goes out with the member's current generation, which the broker checks.
// Polls block rebalances (kgo.BlockRebalanceOnPoll) only from a poll's
// return until its records are in their partitions' queues, which never
// waits: AllowRebalance follows each dispatch, so callbacks never run
// between a poll and its dispatch, and never wait for a handler.
//
// With kgo.InstanceID (static membership), a member that restarts within
// its session timeout gets its partitions back without a rebalance; Stop
// then does not leave the group.
//
// # A partition that waits
//
// Each partition is handled in offset order, one record (or batch,
// Options.BatchSize) at a time, partitions concurrently
// (Options.Concurrency). A partition whose worker waits (a key in flight
// elsewhere, a store that is down, a retry in place) stops taking its
// records; once Options.PartitionBuffer of them wait, the partition is
// paused alone (PauseFetchPartitions), and resumed once half are taken.
// The other partitions keep fetching: at most PartitionBuffer records, plus
// what one fetch response held for it (kgo.FetchMaxPartitionBytes), wait
// in memory per partition.
//
// # The envelope, ids and decisions
//
// As in dedupkafka: a *dedup.Message[T] whose Source and Stream are the
// topic, Partition and Offset the record's, Header its headers ([Header]),
// Timestamp its time, Broker "kafka" ([BrokerKafka]); [Native] returns the
// *kgo.Record. Key on [HeaderMessageID] (stamped by [StampMessageID] and
// the [OutboxPublisher]), the record key ([MessageKey]) or the body. Ack
// moves the partition's watermark; Retry retries in place after the
// decision's delay, or writes a copy to a retry topic (Options.RetryTopics,
// named by adapter.RetryName, read by a Consumer of its own that waits for
// each copy's [HeaderNotBefore]); DeadLetter writes the record to
// Options.DeadLetterTopic (checked at Start: [ErrDeadLetterTopic]) or,
// with Options.DropPoison, drops it, logged and counted. Dead letters and
// retry copies carry the same headers as dedupkafka's (delivery.Header*,
// [HeaderFirstFailure], [HeaderNotBefore]), so dedupctl redrive and a
// retry-topic Consumer of either package read them, and are produced with
// the Consumer's client, acknowledged by all in-sync replicas, before the
// original is committed.
//
// # Commits
//
// The watermarks (the last record before which every record taken has an
// outcome, counted in fetch order) of the owned partitions go out in one
// commit every Options.CommitInterval (1s by default), or after every
// outcome with CommitEveryOutcome, and at each revoke and at Stop. Nothing
// is committed before its outcome is recorded: what a crash loses is only
// commits, and the next owner re-reads those records, which the store
// answers as duplicates.
//
// # Observing
//
// Each delivery is reported once, when settled, to the receiver's
// Observer (delivery.Event, as every adapter), with the consumer group,
// the first seed broker and Options.DestinationTemplate in its Origin;
// dead letters and retry copies carry the delivery's trace context.
// [Consumer.Stats] counts in the dedup.ConsumerStats shape.
//
// # Lifecycle
//
// Start checks the dead-letter and retry topics and the horizon, builds
// the client (which joins the group), and starts polling. Stop stops
// polling, lets the handlers running finish (records not started are left
// for the next owner), commits, and closes the client; at ctx's end it
// cancels the handlers and returns ctx's error. A context given to Start
// that ends without Stop is a hard stop: Err matches [ErrStoppedUnasked].
package dedupfranz
