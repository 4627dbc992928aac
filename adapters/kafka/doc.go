// Package dedupkafka runs a dedup.Receiver over a segmentio/kafka-go
// consumer-group Reader ([Consumer]). Import it next to kafka-go under an
// alias:
//
//	import (
//		"github.com/segmentio/kafka-go"
//
//		"github.com/dedup-go/dedup"
//		dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
//		"github.com/dedup-go/dedup/idstrategy"
//	)
//
//	charge := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) { ... }
//	rcv, err := dedup.NewReceiver(store, idstrategy.MessageHeader[Order](dedupkafka.HeaderMessageID), charge,
//		&dedup.Config{Namespace: "billing"})
//	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, GroupID: "billing", Topic: "orders"}) // CommitInterval 0
//	defer r.Close() // yours: closed after Stop, it leaves the group
//	c, err := dedupkafka.NewConsumer(r, rcv, &dedupkafka.Options{DeadLetterTopic: "orders.dlq"})
//	err = c.Start(context.Background()) // the consumer's life: a context that ends without Stop is a hard stop
//
//	<-sigCtx.Done() // signal.NotifyContext(ctx, syscall.SIGTERM)
//	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
//	defer cancel()
//	err = c.Stop(stopCtx) // stops fetching, finishes what is in flight, commits
//
// A nil *Options is the zero Options: every field takes its default. One
// field has none: where poison goes (Options.DeadLetterTopic, or
// Options.DropPoison to drop it on purpose). So NewConsumer refuses
// Options that set neither, nil included, with an error matching
// dedup.ErrInvalidConfig that names both.
//
// Consumer-side deduplication is not optional with kafka-go: it has no
// idempotent producer (a write retried after a timeout is stored twice, at
// two offsets) and no transactions, and a rebalance re-reads everything
// after the last commit (and may even accept a stale commit from the
// partition's previous owner, rewinding the new one).
//
// # The envelope
//
// The adapter decodes each value (with dedup.JSONDecoder unless
// Options.Decoder says otherwise) and hands the receiver the envelope every
// adapter of dedup fills, a *dedup.Message[T]:
//
//	Body, Data         the decoded value and the value as produced
//	Header             the record headers ([Header]: in order, names match exactly); nil without any
//	Source, Stream     the topic
//	Partition, Offset  the record's partition and offset
//	Timestamp          the record's time
//	Broker             "kafka" (BrokerKafka)
//	ID, DeliveryCount  empty and 0: Kafka has neither message ids nor delivery counts
//	                   (a message of a retry topic: DeliveryCount the attempt it is on, Stream,
//	                   Partition and Offset where it was first read)
//
// [Native] returns the kafka.Message behind an envelope (its Key, say). Do not commit it: the Consumer does, once the outcome is recorded.
// A value that does not decode never reaches the receiver: it is poison,
// dead-lettered with reason "undecodable".
//
// # Ids
//
// Any dedup.KeyFunc[*dedup.Message[T]] works. Key on an id the producer
// puts in every copy of a message:
//
//	idstrategy.MessageHeader[T](dedupkafka.HeaderMessageID)   a Message-Id header, stamped by [Writer] or [StampMessageID]
//	dedupkafka.MessageKey[T]()                                the record key, when it names one message (not an entity);
//	                                                          here, not in idstrategy: only the kafka.Message has it
//	idstrategy.BodyField                                      a field of the decoded value (an order id)
//	idstrategy.DataHash, DataCanonicalJSON                    a hash of the value, for producers that send no id
//	idstrategy.TopicPartitionOffset                           the record's position: catches re-reads after a
//	                                                          rebalance or a crash, not a producer's retry (two offsets)
//
// idstrategy.FirstOf combines them (a header, else the key, else a hash).
// [Writer] wraps a kafka.Writer so that every message it writes carries a
// Message-Id (outbox.NewMessageID), kept when the same messages are
// written again.
//
// # Decisions
//
// Every outcome goes through the receiver's Decide:
//
//	Ack          processed, duplicate, bypassed, or done but not stored   the watermark moves past it
//	Retry        handler error, in flight elsewhere, store down (fail-closed)   retried in place after the decision's delay,
//	                                                                            or written to a retry topic (see Retry topics)
//	DeadLetter   undecodable, no id, invalid id, key reused, permanent error, attempts exhausted   written to DeadLetterTopic, then the watermark moves
//
// Each partition is handled in offset order, one message at a time
// (Options.BatchSize 1) or in batches through the receiver's HandleBatch,
// and partitions concurrently (Options.Concurrency). A message to retry is
// retried in place: the partition waits for it (keeping its order) while
// the other partitions go on, until it succeeds, is dead-lettered (the
// receiver counts attempts against MaxAttempts) or the consumer stops. In a
// batch, the messages after a failed one are not held back: they may take
// effect before its retry does. And a batch records its completions
// together, after its last handler: a crash in the middle of a batch runs
// again, on the next owner, the handlers of the batch that had already
// succeeded (with BatchSize 1 that window is one completion's round trip).
//
// # Commits
//
// The reader must have CommitInterval 0 (Start refuses another: kafka-go's
// asynchronous commits return at once and report errors only to its own
// logger), and the Consumer commits itself: each partition's watermark,
// the last message before which every fetched message has an outcome,
// counted in fetch order (offsets have gaps after compaction and
// transaction markers; kafka-go keeps only the highest offset per
// partition, so a commit out of order would skip unfinished messages). The
// watermarks of all partitions go out in one commit every
// Options.CommitInterval (1s by default), or after every outcome with
// CommitEveryOutcome: a partition goes on once its watermark is committed,
// and the partitions whose watermarks moved while a commit was on its way
// go out together in the next. Failed commits are logged and retried on
// the next tick; Stop returns the final commit's error. What a crash loses is only
// commits: the next owner re-reads from the last one, and the store answers
// what was done as duplicates.
//
// # Dead letters
//
// A dead letter keeps the original key, value and headers, and adds the
// headers every adapter names alike (delivery.Header*): Dedup-Reason,
// Dedup-Error, Dedup-Source (the topic the message was read from: a retry
// topic for a message of one), Dedup-Stream, Dedup-Partition and
// Dedup-Offset (where it was first read: for a message of a retry topic,
// the original's topic, partition and offset), Dedup-Consumer-Group,
// Dedup-Key (the record's key in the store, when it had one) and
// Dedup-Attempt, and Kafka's own [HeaderFirstFailure]. Its Message-Id is
// "dedup-dlq:<topic>:<partition>:<offset>", the same whoever writes it, so
// that a dead letter written twice (its original's commit was lost) is
// recognisable downstream; the original's Message-Id moves to
// Dedup-Original-Message-Id. Dead letters written by 0.1 name some of
// them otherwise (Dedup-Topic, Dedup-Group, Dedup-Message-Id):
// delivery.LookupHeader reads either name, over [Header]
// (delivery.LookupHeader(dedupkafka.Header(m.Headers),
// delivery.HeaderStream)). It is written with RequiredAcks all, and the original
// is committed only after the write is acknowledged; a write that fails is
// retried in place after the receiver's StoreRetryDelay. The Consumer
// creates no topic: Start fails with [ErrDeadLetterTopic], naming it, when
// the dead-letter topic does not exist (asked of the DeadLetterWriter's
// cluster when one is given, else of the reader's), rather than stall a
// partition at the first poison message.
//
// # Retry topics
//
// A retry in place holds its partition back for the decision's delay.
// With Options.RetryTopics (tiers such as 30s and 5m; none by default), a
// handler error whose delay is at least the smallest tier is written
// instead to the retry topic adapter.RetryName(topic, tier),
// "<topic>.retry.<tier>", for the smallest tier at least the delay, or the
// largest (the delay is rounded up to a tier and capped at the largest).
// The retry message keeps the key, value and headers (its Message-Id too,
// so that the store counts the attempts of one message), with
// Dedup-Source the topic the failed delivery was read from, Dedup-Stream,
// Dedup-Partition and Dedup-Offset saying where it was first read,
// Dedup-Attempt the attempt that failed, [HeaderFirstFailure],
// Dedup-Reason, Dedup-Error, Dedup-Consumer-Group, and [HeaderNotBefore]:
// the write's time plus the tier. It is written with
// RequiredAcks all, and the original is committed only once the write is
// acknowledged, as for a dead letter. Only handler errors go there: a
// message in flight elsewhere, a store that is down and a shutdown are
// still retried in place.
//
// A retry topic is read by a Consumer of its own, with the same receiver
// and options on a reader of the retry topics. It waits, per partition and
// in order, until each message's not-before (on a timer; Stop ends the
// wait and commits nothing past the waiting message), and hands it to the
// receiver with Source the retry topic, Stream, Partition and Offset the
// original's (so that a key on them stays the same), and DeliveryCount the
// attempt it is on. Another failure goes to a retry topic again, and
// MaxAttempts ends in the dead-letter topic, whose letter names the
// original topic, partition and offset.
//
// The retry topics keep the names 0.1 gave them (adapter.RetryName names
// them alike), and the copies 0.1 left in them, whose headers name the
// original's topic Dedup-Topic and the group Dedup-Group, are read after
// the upgrade as the copies of the original they name: the Consumer reads
// every header of a retry copy with delivery.LookupHeader.
//
// What is given up is order: a retried message takes effect after the
// messages behind it in its partition. Use retry topics where a message's
// effect does not depend on the ones before it with the same key.
//
// Start checks that the retry topics of each topic read exist (the
// Consumer creates none: create them like the topics they retry), that
// each keeps messages at least as long as its tier, and that the
// receiver's retention is at least the longest tier (a failed record and
// its attempt count must outlive the wait); it fails with [ErrRetryTopics]
// otherwise. A reader of a retry topic checks the tiers of the topic it
// retries.
//
// # Rebalances and restarts
//
// kafka-go gives no rebalance callback and may still hand out messages of
// a partition it has lost. None of that matters for correctness here: the
// store, not the partition assignment, decides who runs a handler. A
// message the old owner finished is a duplicate for the new one; a message
// the old owner is still handling is in flight (the new owner looks at it
// again after 200ms, twice as long each further time, never later than the
// holder's lease ends: Decide's delay, waited in place); a rewound offset
// is re-read and absorbed.
//
// What a rebalance costs: kafka-go has only eager balancers, so every
// rebalance (a member joining, leaving, or missing its session timeout)
// stops fetching on all partitions until the group has re-formed, and the
// new owners re-read from the last commit. Handlers running meanwhile go
// on under their leases, so the lease (dedup.Config.Lease) must outlast a
// rebalance: a lease that expires first lets the new owner run the same
// message again alongside. After a member is killed, its partitions wait
// for the session timeout, then the re-formed group, then the rest of the
// killed handler's lease.
//
// # What a rebalance and a crash cost
//
// Measured (TestRebalanceStalls: 12 partitions, consumer processes over a
// tieredstore and one Redis, the default 30s lease, 160 orders/s plus 30%
// copies, a burst of 1,200 orders, four runs): when a consumer joins while
// the old owners still handle a fetched backlog, no partition went more
// than 0.3 to 0.6s without an effect, and the group handled 400 orders/s
// in the 5s after the join. Waiting the whole remaining lease on a key in
// flight instead (the behaviour before) stalls partitions for up to that
// lease: 25 to 35s at each membership change in a scale-out run with the
// default lease. When a consumer is SIGKILLed inside a handler, the
// partition whose key it held waits out the rest of that lease (30.1 to
// 30.2s): nothing tells a dead holder from a slow one. The other
// partitions of the consumer that waits go on until the waiting
// partition's buffer is full (see Back-pressure: 256 messages, here after
// about 15s), and then wait too (14 to 16.5s; 1.1s with PartitionBuffer
// 2048): a PartitionBuffer of a partition's messages per lease keeps them
// flowing, at that much memory per waiting partition.
//
// kafka-go (v0.4.51) tells a group Reader's user nothing when a partition
// is taken away: FetchMessage returns no generation (it drops, unreported,
// the old generation's messages still in its own queue), Stats().Rebalances
// counts generations since the last Stats call (which resets it) and names
// no partition, and the Reader's ConsumerGroup and Generation are not
// exposed. So the old owner goes on with what it had fetched, which costs
// little: it holds no key while it waits, and the new owner, re-reading
// from the last commit behind it, finds its keys done or looks at them
// again within a fraction of a second.
//
// kafka-go (v0.4.51) can also leave a member holding partitions it no
// longer fetches. When a generation ends (its first heartbeat finds a
// rebalance) before the Reader's goroutine has started it, held up longer
// than HeartbeatInterval (a starved process, a slow ReaderConfig.Logger),
// the old generation's teardown runs unwaited and may cancel the next
// generation's partition readers: the member heartbeats and keeps its
// partitions, FetchMessage returns nothing, and nothing is logged, until
// the next rebalance. The Consumer cannot see it (kafka-go exposes neither
// the generation nor the assignment); a HeartbeatInterval of seconds, as
// kafka-go's default, makes it unlikely.
//
// # Back-pressure
//
// The reader cannot pause one partition. While a partition is stuck (its
// store is down, its message retries), fetching goes on until its buffer
// (Options.PartitionBuffer) is full, and then stops for every partition:
// at most partitions x (PartitionBuffer + 1) + 1 messages are held by the
// Consumer, plus the reader's QueueCapacity (100 by default) in the
// reader. A partition whose messages were queued behind the stuck one's
// waits too.
//
// # Horizon check
//
// At Start, the Consumer reads each topic's retention.ms and compares the
// reader's redelivery horizon with the receiver's retention: a reader that
// starts at the first offset (kafka-go's default) re-reads the whole
// retained topic when its group loses its committed offsets, so its
// horizon is the topic's retention.ms (unbounded for -1), and a duplicate
// read after the receiver's retention runs again; a reader that starts at
// kafka.LastOffset skips to the end instead, and re-reads go back only as
// far as the last commit (its horizon is taken as 0). It logs a warning
// when the retention is shorter; with Options.StrictHorizon, Start fails
// with [ErrHorizon].
//
// # Observing
//
// The adapter has no callback of its own. Each handing of a message to the
// receiver is one delivery (adapter.Receiver's Deliver, DeliverBatch for
// a batch, Refused for a value that does not decode), and the receiver's
// dedup.Config.Observer hears of it once, when the adapter settled it, as
// one delivery.Event: Broker "kafka" ([BrokerKafka]), Source and Stream the
// topic, Partition and Offset the message's (for a message of a retry
// topic, Stream, Partition and Offset are where it was first read),
// ConsumerGroup the reader's GroupID, ServerAddress and ServerPort the
// reader's first broker (kafka-go does not say which broker served a
// fetch), DestinationTemplate Options.DestinationTemplate; the receiver's
// answer, and what was done:
//
//	Ack                  Decision Ack, settled once the watermark moved past it. Under
//	                     CommitEveryOutcome, SettleDuration and SettleErr are the commit's, made
//	                     at once; otherwise the commit is queued for the next tick (SettleDuration 0)
//	Retry in place       Decision Retry, settled at once (SettleDuration 0): each try is a
//	                     delivery of its own, reported with its own event
//	Retry topic          Decision Retry, settled once the copy was acknowledged
//	Dead letter          Decision DeadLetter, settled once the dead letter was acknowledged
//	Dropped (DropPoison) Decision Ack with the poison's reason (undecodable, permanent-error, ...):
//	                     committed past, timed as an ack
//
// A failed dead-letter or retry-topic write is tried again (after the
// receiver's StoreRetryDelay) without handing the message to the receiver
// again, so it is part of the same delivery: its SettleDuration runs from
// the first write to the one acknowledged. When the consumer stops first,
// the delivery is reported with SettleErr the last write's error
// (matching [ErrDeadLetter] or [ErrRetryWrite]), and the message is left
// uncommitted for the next owner. Messages fetched but never handed over
// when the consumer stops are not reported: they are left uncommitted.
//
// The handler, the Observer and the adapter's logs about a delivery get
// the delivery's context (with the span a delivery.DeliveryStarter Observer,
// such as dedupotel's, started), and every log line is written with
// slog's Context methods. Dead letters and retry copies carry the
// delivery's trace context in their headers, written by the Observer when
// it is a delivery.Injector (a header of the same name the original had, the
// producer's traceparent say, takes the new value): the next consumer's
// span links to this delivery's. On the producer side, [Writer]'s
// Injector does the same with the ctx given to WriteMessages.
//
// [Consumer.Stats] counts what the Consumer did, in the dedup.ConsumerStats
// shape every adapter shares: Delivered (messages fetched; a retry in
// place is not fetched again), Acked, RetriedInPlace (each try),
// RetriedLater (copies written to retry topics), DeadLettered (dead
// letters written), PoisonDropped (DropPoison), SettleFailures (failed
// OffsetCommits, and failed dead-letter and retry-topic writes, each try);
// Reconnects and StaleDeliveries stay 0 (kafka-go reports neither). The
// receiver's Stats counts the dead letters written by reason.
//
// # Lifecycle
//
// Start checks the reader, the dead-letter and retry topics and the
// horizon, and starts one goroutine fetching and one per partition
// handling. Stop stops fetching, lets the partitions finish the messages
// they are handling (fetched messages not started are left for the next
// owner, a retry wait ends), and commits the watermarks; at ctx's deadline
// it cancels the handlers and returns ctx's error. Give Stop a context of
// its own, not Start's.
//
// What the caller passes in stays the caller's: the Consumer never closes
// the reader, nor a DeadLetterWriter, RetryWriter or Client given in
// Options; it closes only the writers it made. Close the reader after Stop
// returns: kafka-go's Close leaves the consumer group, so its partitions go
// to the other members at once (until then the member keeps them, fetching
// nothing for the Consumer).
//
// The publishers, [Writer] and [OutboxPublisher], close as every publisher
// of dedup does: Close(ctx) closes the kafka.Writer they write with, once
// what is in flight is written, bounded by ctx; a second Close returns the
// same.
//
// Stopped is closed once everything is gone. A stop nobody asked for (the
// context given to Start ended without Stop, the reader was closed under
// the Consumer) is logged at error level, and Err returns it, matching
// [ErrStoppedUnasked] and wrapping its cause: context.Cause of Start's
// context, io.EOF when a fetch found the reader closed, or
// io.ErrClosedPipe when a commit did. Any other error of FetchMessage (a
// partition's fetch that failed, a group join that failed kafka-go's
// MaxAttempts times) is one kafka-go's reader goes on from by itself: it is
// logged at warning level and the Consumer fetches again, rather than
// leave its member in the group holding partitions nobody handles.
// The end of Start's context is a hard stop: the handlers' contexts are
// cancelled, and the watermarks committed.
package dedupkafka
