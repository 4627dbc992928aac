package redrive

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/delivery"
)

// KafkaConfig says where a Kafka source reads.
type KafkaConfig struct {
	// Brokers are the bootstrap brokers, host:port.
	Brokers []string
	// Topic is the dead-letter topic.
	Topic string
	// Group is the consumer group whose committed offsets say which
	// letters are removed: the tool's own, never a consumer's.
	Group string
	// Timeout bounds each connection's dial.
	Timeout time.Duration
}

// Kafka reads the dead letters of a topic, partition by partition, from the
// offset Group committed (the first one kept without) to the end each
// partition had when the pass began. A letter is removed by committing
// Group's offset past it, which can only pass letters in order: a letter
// left in place (skipped, filtered out, refused) holds its partition's
// offset, and the letters after it that were redriven are read again by the
// next run, which finds their records completed and passes them (or, if
// their copy was not handled yet, republishes it again: a copy the
// receiver's record answers).
//
// A copy goes to the topic and partition the letter names (Dedup-Stream,
// the topic the original was first read from, and Dedup-Partition), with
// the original key and its Message-Id back (Dedup-Original-Message-Id),
// written with acks from all in-sync replicas. The headers are read with
// delivery.LookupHeader, so the letters of 0.1 (Dedup-Topic,
// Dedup-Message-Id) are redriven alike.
type Kafka struct {
	client    *kafka.Client
	transport *kafka.Transport
	writer    *kafka.Writer
	brokers   []string
	dialer    *kafka.Dialer
	topic     string
	group     string
	parts     []*kafkaPart
	cur       int
	reader    *kafka.Reader
	size      int64
}

var _ Source = (*Kafka)(nil)

// kafkaPart is a partition of the pass.
type kafkaPart struct {
	id        int
	next, end int64 // the next offset to read; the end when the pass began
	held      bool  // a letter left in place holds the partition's offset
}

// kafkaLetter is what a Kafka letter keeps for republishing and removal.
type kafkaLetter struct {
	m         kafka.Message
	part      *kafkaPart
	topic     string // where the copy goes
	partition int    // and its partition, -1 when the letter does not say
}

// NewKafka connects to cfg.Brokers and begins a pass over cfg.Topic. The
// error of unreachable brokers names their addresses; one of a topic that
// does not exist matches ErrNotFound.
func NewKafka(ctx context.Context, cfg KafkaConfig) (*Kafka, error) {
	where := "Kafka " + strings.Join(cfg.Brokers, ",")
	tr := &kafka.Transport{DialTimeout: cfg.Timeout, ClientID: "dedupctl-redrive", IdleTimeout: time.Minute}
	k := &Kafka{
		client: &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Timeout: cfg.Timeout, Transport: tr}, transport: tr,
		brokers: cfg.Brokers, dialer: &kafka.Dialer{Timeout: cfg.Timeout, ClientID: "dedupctl-redrive"},
		topic: cfg.Topic, group: cfg.Group,
	}
	if err := k.begin(ctx); err != nil {
		tr.CloseIdleConnections()
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	k.writer = &kafka.Writer{
		Addr: kafka.TCP(cfg.Brokers...), Transport: tr, Balancer: toPartition{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond, MaxAttempts: 3, WriteBackoffMax: 500 * time.Millisecond,
	}
	return k, nil
}

// begin finds the topic's partitions, their ends and the group's offsets.
func (k *Kafka) begin(ctx context.Context) error {
	meta, err := k.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{k.topic}})
	if err != nil {
		return err
	}
	if len(meta.Topics) != 1 || errors.Is(meta.Topics[0].Error, kafka.UnknownTopicOrPartition) {
		return fmt.Errorf("%w: topic %q", ErrNotFound, k.topic)
	}
	if err := meta.Topics[0].Error; err != nil {
		return fmt.Errorf("topic %q: %w", k.topic, err)
	}
	var ids []int
	for _, p := range meta.Topics[0].Partitions {
		ids = append(ids, p.ID)
	}
	slices.Sort(ids)
	lreq := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for _, id := range ids {
		lreq.Topics[k.topic] = append(lreq.Topics[k.topic], kafka.FirstOffsetOf(id), kafka.LastOffsetOf(id))
	}
	offs, err := k.client.ListOffsets(ctx, lreq)
	if err != nil {
		return fmt.Errorf("topic %q: offsets: %w", k.topic, err)
	}
	bounds := map[int]kafka.PartitionOffsets{}
	for _, po := range offs.Topics[k.topic] {
		if po.Error != nil {
			return fmt.Errorf("topic %q partition %d: offsets: %w", k.topic, po.Partition, po.Error)
		}
		bounds[po.Partition] = po
	}
	committed, err := k.client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: k.group, Topics: map[string][]int{k.topic: ids}})
	if err != nil {
		return fmt.Errorf("group %q: offsets: %w", k.group, err)
	}
	switch {
	case errors.Is(committed.Error, kafka.GroupIdNotFound):
		// A group that never committed (some brokers say so, others
		// answer -1 offsets).
		committed.Topics = nil
	case committed.Error != nil:
		return fmt.Errorf("group %q: offsets: %w", k.group, committed.Error)
	}
	from := map[int]int64{}
	for _, p := range committed.Topics[k.topic] {
		if errors.Is(p.Error, kafka.GroupIdNotFound) {
			continue
		}
		if p.Error != nil {
			return fmt.Errorf("group %q partition %d: offsets: %w", k.group, p.Partition, p.Error)
		}
		from[p.Partition] = p.CommittedOffset
	}
	for _, id := range ids {
		b := bounds[id]
		next := b.FirstOffset
		if c, ok := from[id]; ok && c > next {
			next = c // -1 when the group committed none
		}
		p := &kafkaPart{id: id, next: next, end: b.LastOffset}
		if p.end > p.next {
			k.size += p.end - p.next
		}
		k.parts = append(k.parts, p)
	}
	return nil
}

// Next reads the next letter of the current partition, moving to the next
// partition at its end.
func (k *Kafka) Next(ctx context.Context) (*Letter, error) {
	for k.cur < len(k.parts) {
		p := k.parts[k.cur]
		if p.next >= p.end {
			k.closeReader()
			k.cur++
			continue
		}
		if k.reader == nil {
			k.reader = kafka.NewReader(kafka.ReaderConfig{
				Brokers: k.brokers, Topic: k.topic, Partition: p.id, Dialer: k.dialer,
				MinBytes: 1, MaxBytes: 4 << 20, MaxWait: 100 * time.Millisecond,
			})
			if err := k.reader.SetOffset(p.next); err != nil {
				return nil, err
			}
		}
		m, err := k.reader.FetchMessage(ctx)
		if err != nil {
			return nil, fmt.Errorf("topic %q partition %d offset %d: %w", k.topic, p.id, p.next, err)
		}
		if m.Offset >= p.end {
			p.next = p.end // written after the pass began: the next run's
			continue
		}
		p.next = m.Offset + 1
		return kafkaLetterOf(m, p), nil
	}
	return nil, ErrEnd
}

func (k *Kafka) closeReader() {
	if k.reader != nil {
		_ = k.reader.Close()
		k.reader = nil
	}
}

func kafkaLetterOf(m kafka.Message, p *kafkaPart) *Letter {
	h := dedupkafka.Header(m.Headers)
	get := func(name string) (string, bool) { return delivery.LookupHeader(h, name) }
	l := &Letter{
		ID:     strconv.Itoa(m.Partition) + "/" + strconv.FormatInt(m.Offset, 10),
		Time:   m.Time,
		Header: h.Get,
		Body:   m.Value,
	}
	l.MessageID, _ = get(delivery.HeaderOriginalMessageID)
	kl := kafkaLetter{m: m, part: p, partition: -1}
	if reason, ok := get(delivery.HeaderReason); ok {
		l.Marking, l.Reason = ByAdapter, reason
		l.Key, _ = get(delivery.HeaderKey)
		l.Error, _ = get(delivery.HeaderError)
		// The original's topic: Dedup-Stream; a letter of 0.1 names it
		// Dedup-Topic, which LookupHeader finds as the source (a letter
		// of now has a source too, the retry topic its last attempt was
		// read from, when it came from one: the stream goes first).
		topic, ok := get(delivery.HeaderStream)
		if !ok {
			topic, _ = get(delivery.HeaderSource)
		}
		kl.topic = topic
		if s, ok := get(delivery.HeaderPartition); ok {
			if n, err := strconv.Atoi(s); err == nil && n >= 0 {
				kl.partition = n
			}
		}
		if kl.topic != "" {
			l.To = "topic " + kl.topic
			if kl.partition >= 0 {
				l.To += " partition " + strconv.Itoa(kl.partition)
			}
		}
	}
	l.handle = kl
	return l
}

// toPartition puts a copy in the partition of its Partition field when
// the topic has it, and balances it by key otherwise.
type toPartition struct{}

func (toPartition) Balance(m kafka.Message, partitions ...int) int {
	if slices.Contains(partitions, m.Partition) {
		return m.Partition
	}
	return (&kafka.Hash{}).Balance(m, partitions...)
}

// Republish writes the original to its topic and partition and waits for
// every in-sync replica.
func (k *Kafka) Republish(ctx context.Context, l *Letter) error {
	kl := l.handle.(kafkaLetter)
	m := kafka.Message{Topic: kl.topic, Partition: kl.partition, Key: kl.m.Key, Value: kl.m.Value, Headers: restoredKafkaHeaders(kl.m.Headers)}
	err := k.writer.WriteMessages(ctx, m)
	var we kafka.WriteErrors
	if errors.As(err, &we) && len(we) == 1 && we[0] != nil {
		err = we[0]
	}
	var ke kafka.Error
	switch {
	case errors.Is(err, kafka.UnknownTopicOrPartition), errors.As(err, &ke) && !ke.Temporary():
		// The writer retried what might pass (a topic being created); a
		// topic that does not exist, a record too large, one the broker's
		// policy refuses are this letter's own.
		return fmt.Errorf("%w: topic %q: %w", ErrRefused, kl.topic, err)
	}
	return err
}

// restoredKafkaHeaders are the original's headers: the letter's without
// the Dedup-* headers and its own Message-Id, with the original's
// Message-Id (Dedup-Original-Message-Id, or Dedup-Message-Id in a letter
// of 0.1) back.
func restoredKafkaHeaders(h []kafka.Header) []kafka.Header {
	out := make([]kafka.Header, 0, len(h))
	for _, kv := range h {
		switch {
		case isOriginalID(kv):
			out = append(out, kafka.Header{Key: dedupkafka.HeaderMessageID, Value: kv.Value})
		case kv.Key == dedupkafka.HeaderMessageID, hasPrefixFold(kv.Key, "Dedup-"):
		default:
			out = append(out, kv)
		}
	}
	return out
}

// isOriginalID reports whether kv carries the original's Message-Id, by
// any name delivery.LookupHeader reads it by.
func isOriginalID(kv kafka.Header) bool {
	_, ok := delivery.LookupHeader(dedupkafka.Header{kv}, delivery.HeaderOriginalMessageID)
	return ok
}

// Remove commits the group's offset past the letter, unless a letter
// before it in its partition was left in place.
func (k *Kafka) Remove(ctx context.Context, l *Letter) error {
	kl := l.handle.(kafkaLetter)
	if kl.part.held {
		return nil
	}
	resp, err := k.client.OffsetCommit(ctx, &kafka.OffsetCommitRequest{
		GroupID: k.group, GenerationID: -1,
		Topics: map[string][]kafka.OffsetCommit{k.topic: {{Partition: kl.part.id, Offset: kl.m.Offset + 1}}},
	})
	if err != nil {
		return fmt.Errorf("commit group %q: %w", k.group, err)
	}
	for _, p := range resp.Topics[k.topic] {
		if p.Error != nil {
			return fmt.Errorf("commit group %q partition %d: %w", k.group, p.Partition, p.Error)
		}
	}
	return nil
}

// Leave holds the letter's partition offset where it is.
func (k *Kafka) Leave(_ context.Context, l *Letter) error {
	l.handle.(kafkaLetter).part.held = true
	return nil
}

// Size is how many letters the pass may read: the partitions' ends less
// the group's offsets.
func (k *Kafka) Size() int64 { return k.size }

// Close closes the reader, the writer and the connections.
func (k *Kafka) Close(context.Context) error {
	k.closeReader()
	err := k.writer.Close()
	k.transport.CloseIdleConnections()
	return err
}
