package e2e_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/dedup-go/dedup"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/adaptertest"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
)

// kafkaPartitions is the partitions of each topic of the Kafka test.
const kafkaPartitions = 4

// TestEndToEndKafka is runE2E on Kafka (kfake, in the test's process,
// which speaks the protocol to the processes): a dedupkafka consumer of
// the orders' topic (dead letters to a topic of their own), the relays
// writing with dedupkafka's OutboxPublisher (a key-hashing writer,
// RequiredAcks all) to one events topic (the Destination is the topic; the
// ordering key is the record key, so a customer's messages share a
// partition; the id in the Message-Id header), and a downstream dedupkafka
// consumer keyed on that header (idstrategy.MessageHeader). Kafka has no
// duplicate window: every copy a relay writes again reaches the
// downstream consumer.
func TestEndToEndKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("a slow fault test (the consumer, the relays and PostgreSQL killed and restarted, end to end on Kafka): skipped under -short")
	}
	t.Parallel()
	runE2E(t, &kafkaE2E{}, e2eParams{orders: 1000, duplicates: 200, customers: 100, kills: 8})
}

// kafkaNames are the topics of a Kafka end-to-end test.
type kafkaNames struct {
	prefix       string
	in, out, dlq string
}

func newKafkaNames(prefix string) kafkaNames {
	p := "pgoutbox.e2e." + prefix + "."
	return kafkaNames{prefix: prefix, in: p + "in", out: p + "out", dlq: p + "dlq"}
}

// kafkaE2E is the e2eBroker of Kafka.
type kafkaE2E struct {
	addr string
	n    kafkaNames
	tr   *kafka.Transport // the test's

	down    *kafka.Reader // the downstream consumer's
	downLog tail          // what it and its reader logged, printed should the test fail
}

func (b *kafkaE2E) child() (string, string, string) { return "kafka", b.addr, b.n.prefix }

// destination: both events go to one topic, so that a customer's
// messages are in one partition, in order.
func (b *kafkaE2E) destination(string) string { return b.n.out }

func (b *kafkaE2E) setup(t *testing.T) {
	b.n = newKafkaNames(suffix())
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(500*time.Millisecond),
		kfake.SeedTopics(kafkaPartitions, b.n.in, b.n.out, b.n.dlq))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	b.addr = c.ListenAddrs()[0]
	b.tr = &kafka.Transport{}
	t.Cleanup(b.tr.CloseIdleConnections)
}

func (b *kafkaE2E) publish(t *testing.T, orders [][]byte) {
	w := &kafka.Writer{Addr: kafka.TCP(b.addr), Topic: b.n.in, Balancer: &kafka.RoundRobin{}, RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, BatchSize: 1000, Transport: b.tr}
	defer func() { require.NoError(t, w.Close()) }()
	msgs := make([]kafka.Message, len(orders))
	for i, o := range orders {
		msgs[i] = kafka.Message{Value: o}
	}
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	require.NoError(t, w.WriteMessages(ctx, msgs...), "the orders were not all written")
}

func (b *kafkaE2E) downstreamKey() dedup.KeyFunc[*dedup.Message[e2eEvent]] {
	return idstrategy.MessageHeader[e2eEvent](dedupkafka.HeaderMessageID)
}

func (b *kafkaE2E) startDownstream(t *testing.T, rcv *dedup.Receiver[*dedup.Message[e2eEvent], struct{}]) {
	log := slog.New(slog.NewTextHandler(&b.downLog, &slog.HandlerOptions{Level: slog.LevelInfo}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the downstream consumer's log:\n%s", b.downLog.String())
		}
	})
	r := kafka.NewReader(b.readerConfig("downstream", b.n.out, log))
	b.down = r
	t.Cleanup(func() { _ = r.Close() })
	dc, err := dedupkafka.NewConsumer(r, rcv, &dedupkafka.Options{DropPoison: true, Logger: log})
	require.NoError(t, err)
	require.NoError(t, dc.Start(context.WithoutCancel(t.Context())))
	adaptertest.StopAtCleanup(t, dc)
}

// lag returns how many messages of topic the group has not committed,
// and each partition's committed offset against its end.
func (b *kafkaE2E) lag(t *testing.T, group, topic string) (int64, string) {
	ends := b.ends(t, topic)
	client := &kafka.Client{Addr: kafka.TCP(b.addr), Transport: b.tr}
	ps := make([]int, kafkaPartitions)
	for p := range ps {
		ps[p] = p
	}
	resp, err := client.OffsetFetch(t.Context(), &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: ps}})
	require.NoError(t, err)
	require.NoError(t, resp.Error)
	committed := map[int]int64{}
	for _, p := range resp.Topics[topic] {
		require.NoError(t, p.Error)
		committed[p.Partition] = p.CommittedOffset
	}
	var lag int64
	var each []string
	for p := range kafkaPartitions {
		lag += ends[p] - max(committed[p], 0)
		each = append(each, fmt.Sprintf("p%d %d/%d", p, committed[p], ends[p]))
	}
	return lag, strings.Join(each, " ")
}

// ends returns each partition's end offset (the next offset written).
func (b *kafkaE2E) ends(t *testing.T, topic string) map[int]int64 {
	client := &kafka.Client{Addr: kafka.TCP(b.addr), Transport: b.tr}
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for p := range kafkaPartitions {
		req.Topics[topic] = append(req.Topics[topic], kafka.LastOffsetOf(p))
	}
	resp, err := client.ListOffsets(t.Context(), req)
	require.NoError(t, err)
	out := map[int]int64{}
	for _, p := range resp.Topics[topic] {
		require.NoError(t, p.Error)
		out[p.Partition] = p.LastOffset
	}
	return out
}

// pending: a partition's committed offset passes a message only once its
// outcome is final, so the lags count what is in flight too.
func (b *kafkaE2E) pending(t *testing.T) (bool, string) {
	in, inEach := b.lag(t, e2eConsumer, b.n.in)
	down, downEach := b.lag(t, "downstream", b.n.out)
	return in == 0 && down == 0, fmt.Sprintf("incoming lag %d (committed/end: %s), downstream lag %d (%s)", in, inEach, down, downEach)
}

// diagnose describes the groups: their state, and each member's
// partitions (a member's client id names its process, marked when it is
// gone: a member the broker should have evicted); and the downstream
// reader's counts since its last Stats call.
func (b *kafkaE2E) diagnose(t *testing.T) string {
	client := &kafka.Client{Addr: kafka.TCP(b.addr), Transport: b.tr}
	resp, err := client.DescribeGroups(t.Context(), &kafka.DescribeGroupsRequest{GroupIDs: []string{e2eConsumer, "downstream"}})
	if err != nil {
		return "describing the groups failed: " + err.Error()
	}
	var out []string
	for _, g := range resp.Groups {
		line := fmt.Sprintf("group %s: %s, error %v, %d members:", g.GroupID, g.GroupState, g.Error, len(g.Members))
		for _, m := range g.Members {
			gone := ""
			if _, pid, ok := strings.Cut(m.ClientID, "-pid-"); ok {
				if n, err := strconv.Atoi(pid); err == nil && syscall.Kill(n, 0) != nil {
					gone = " (its process is gone)"
				}
			}
			line += fmt.Sprintf(" [%s %s %v%s]", m.ClientID, m.MemberID, m.MemberAssignments.Topics, gone)
		}
		out = append(out, line)
	}
	if b.down != nil {
		rs := b.down.Stats()
		out = append(out, fmt.Sprintf("downstream reader (pid %d): rebalances %d, fetches %d, messages %d, errors %d, queue length %d",
			os.Getpid(), rs.Rebalances, rs.Fetches, rs.Messages, rs.Errors, rs.QueueLength))
	}
	return strings.Join(out, "\n")
}

func (b *kafkaE2E) idle(*testing.T) bool { return true }

func (b *kafkaE2E) deadLetters(t *testing.T) int {
	var n int64
	for _, end := range b.ends(t, b.n.dlq) {
		n += end
	}
	return int(n)
}

// output reads the events topic partition after partition: a customer's
// messages are all in one, in the order written.
func (b *kafkaE2E) output(t *testing.T) []stored {
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	var out []stored
	for p, end := range b.ends(t, b.n.out) {
		if end == 0 {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{b.addr}, Topic: b.n.out, Partition: p, MaxWait: 50 * time.Millisecond})
		for {
			m, err := r.ReadMessage(ctx)
			require.NoError(t, err, "partition %d", p)
			var id string
			for _, h := range m.Headers {
				if h.Key == dedupkafka.HeaderMessageID {
					id = string(h.Value)
				}
			}
			out = append(out, stored{seq: uint64(m.Offset), id: id, subj: fmt.Sprint(p), body: string(m.Value)})
			if m.Offset == end-1 {
				break
			}
		}
		require.NoError(t, r.Close())
	}
	return out
}

// The side of the processes.

// clientID is the client id of this process's reader of group.
func clientID(group string) string { return fmt.Sprintf("%s-pid-%d", group, os.Getpid()) }

// readerConfig is the configuration of a group reader of topic, whose
// client logs to log.
func (b *kafkaE2E) readerConfig(group, topic string, log *slog.Logger) kafka.ReaderConfig {
	return kafka.ReaderConfig{
		Brokers: []string{b.addr}, GroupID: group, Topic: topic,
		// The client id names the process, for diagnose; what kafka-go
		// retries goes to log, and so does what it does: each
		// generation joined, the partitions assigned and each one's
		// reader started and stopped, the offsets committed. A stalled
		// run shows whether a member holding partitions has readers
		// for them.
		Dialer: &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, ClientID: clientID(group)},
		Logger: kafka.LoggerFunc(func(format string, args ...any) {
			msg := strings.TrimSpace(fmt.Sprintf(format, args...))
			if strings.HasPrefix(msg, "no messages received from kafka within the allocated time") {
				return // a fetch's long poll that found nothing: each partition's, 20 times a second
			}
			log.Info("kafka-go: "+msg, slog.String("group", group))
		}),
		ErrorLogger: kafka.LoggerFunc(func(format string, args ...any) {
			log.Warn("kafka-go: "+strings.TrimSpace(fmt.Sprintf(format, args...)), slog.String("group", group))
		}),
		// A third of the session: kafka-go v0.4.51 can leave a member
		// holding partitions it no longer fetches when a generation ends
		// before its reader goroutine started it, held up longer than
		// HeartbeatInterval (adapters/kafka's doc.go); on a starved CI
		// machine a longer interval makes that window rarer.
		MaxWait: 50 * time.Millisecond, SessionTimeout: time.Second, HeartbeatInterval: 300 * time.Millisecond,
		RebalanceTimeout: 2 * time.Second, JoinGroupBackoff: 100 * time.Millisecond,
		ReadBackoffMin: 10 * time.Millisecond, ReadBackoffMax: 100 * time.Millisecond, StartOffset: kafka.FirstOffset,
	}
}

func (b *kafkaE2E) consume(ctx context.Context, rcv *dedup.Receiver[*dedup.Message[e2eOrder], string]) error {
	r := kafka.NewReader(b.readerConfig(e2eConsumer, b.n.in, childLog))
	c, err := dedupkafka.NewConsumer(r, rcv,
		&dedupkafka.Options{DeadLetterTopic: b.n.dlq, Concurrency: kafkaPartitions, Logger: childLog})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	if err := b.awaitPartitions(ctx, e2eConsumer); err != nil {
		return err
	}
	report := func() {
		stopped := false
		select {
		case <-c.Stopped():
			stopped = true
		default:
		}
		// The reader's counts are since the last report. A reader whose
		// partitions are assigned but which fetches nothing shows no
		// kafka-go (*reader).run goroutine in the dump that follows.
		rs := r.Stats()
		childLog.Warn("the consumer's state", slog.Bool("stopped", stopped), slog.Any("err", c.Err()), slog.Any("stats", c.Stats()),
			slog.Group("reader", slog.Int64("rebalances", rs.Rebalances), slog.Int64("fetches", rs.Fetches), slog.Int64("messages", rs.Messages),
				slog.Int64("errors", rs.Errors), slog.Int64("queueLength", rs.QueueLength), slog.Int64("offset", rs.Offset)))
	}
	reportState(report)
	go func() { // the process lives on, and so does this
		<-c.Stopped()
		report()
	}()
	return nil
}

// awaitPartitions waits until this process's member of group holds
// partitions in a stable group: the consumer process is ready, and may be
// killed, only then.
//
// kfake (v0.0.0-20260918054303) may keep for good a member whose process
// was killed while its JoinGroup waited, and a new consumer's join waits
// for the eviction of the member it replaces (up to a session). When the
// next generation completes, kfake answers the dead member's join on its
// closed connection, and arms its session timer only if the answer was
// queued: its reply picks at random between the connection's buffered
// channel and its closed done channel, so about one time in two the
// member gets no timer; the leader's SyncGroup then stops the timer that
// removes members that never synced. The group is stable with a member
// that no process runs, holding its share of the partitions, which nobody
// reads until the next membership change: after the last restart of the
// consumer none comes, and the run does not settle (a real broker evicts
// the member after its session). A member that synced has its timer.
func (b *kafkaE2E) awaitPartitions(ctx context.Context, group string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	client := &kafka.Client{Addr: kafka.TCP(b.addr)}
	me := clientID(group)
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	last := "not described yet"
	for {
		resp, err := client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
		switch {
		case err != nil:
			last = err.Error()
		case len(resp.Groups) != 1:
			last = fmt.Sprintf("%d groups described", len(resp.Groups))
		default:
			g := resp.Groups[0]
			last = fmt.Sprintf("group %s, %d members", g.GroupState, len(g.Members))
			for _, m := range g.Members {
				if m.ClientID == me && g.GroupState == "Stable" && len(m.MemberAssignments.Topics) > 0 {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the consumer's member of group %s holds no partitions of a stable group: %s: %w", group, last, ctx.Err())
		case <-poll.C:
		}
	}
}

func (b *kafkaE2E) publisher(context.Context) (outbox.Publisher, error) {
	return dedupkafka.NewOutboxPublisher(&kafka.Writer{Addr: kafka.TCP(b.addr), Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll,
		BatchTimeout: 2 * time.Millisecond, BatchSize: 128})
}
