package dedupfranz_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedup-go/dedup"
	dedupfranz "github.com/dedup-go/dedup/adapters/franz"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/adaptertest"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/outbox/outboxtest"
)

// TestOutboxPublisher runs the outbox publishers' suite (PublishEach
// included) on kfake: a topic of three partitions of its own per test, a
// topic that does not exist as the destination refused (kgo fails its
// records once its UnknownTopicRetries are spent), read back partition by
// partition.
func TestOutboxPublisher(t *testing.T) {
	t.Parallel()
	addrs := startCluster(t, 1).ListenAddrs()
	p := newOutboxPublisher(t, outboxClient(t, addrs))
	n := 0
	outboxtest.Run(t, func(t *testing.T) outboxtest.Target {
		n++
		topic := fmt.Sprintf("outbox-%d", n)
		createTopics(t, addrs, 3, topic)
		return outboxtest.Target{
			Publisher:   p,
			Destination: topic,
			Unroutable:  topic + "-missing",
			Invalid:     "not a topic",
			Read: func(ctx context.Context, want int) ([]outboxtest.Received, error) {
				rs, err := readTopic(ctx, addrs, topic, want)
				var out []outboxtest.Received
				for _, r := range rs {
					got := outboxtest.Received{Body: r.Value, Header: map[string]string{}}
					got.ID, _ = dedupfranz.Header(r.Headers).Get(dedupfranz.HeaderMessageID)
					for k, v := range dedupfranz.Header(r.Headers).All() {
						got.Header[k] = v
					}
					out = append(out, got)
				}
				return out, err
			},
		}
	})
}

// TestOutboxPublisherRecord: what a record carries (the ordering key as
// its key, the headers in the order of their names, the id stamped last
// in the Message-Id header, a Message-Id of the message's own replaced),
// and the messages that cannot be produced fail alone, for good, without
// being produced.
func TestOutboxPublisherRecord(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	addrs := startCluster(t, 1, topic).ListenAddrs()
	p := newOutboxPublisher(t, outboxClient(t, addrs))
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	keyed := outbox.Message{ID: outbox.MessageID("billing:o-1", "1"), Destination: topic, OrderingKey: "o-1",
		Body: []byte(`{"id":"o-1"}`), Header: map[string]string{"Trace": "t", "Event-Type": "payment.captured", dedupfranz.HeaderMessageID: "forged"}}
	keyless := outbox.Message{ID: outbox.MessageID("billing:o-1", "2"), Destination: topic, Body: []byte{}}
	msgs := []outbox.Message{
		keyed, keyless,
		{ID: "no-topic", Body: []byte("x")},
		{ID: "bad-topic", Destination: "orders/eu", Body: []byte("x")},
		{ID: "dots", Destination: "..", Body: []byte("x")},
		{ID: "", Destination: topic, Body: []byte("x")},
	}
	err := p.Publish(ctx, msgs)
	require.Equal(t, []bool{true, true, false, false, false, false}, outbox.Acknowledged(err, len(msgs)), "%v", err)
	require.ErrorIs(t, err, dedupfranz.ErrInvalidMessage)
	var be *outbox.BatchError
	require.ErrorAs(t, err, &be)
	for _, e := range be.Errs[2:] {
		require.ErrorIs(t, e, outbox.ErrPermanent)
	}

	got, err := readTopic(ctx, addrs, topic, 2)
	require.NoError(t, err)
	require.Len(t, got, 2, "the invalid messages were not produced")
	require.Equal(t, []byte("o-1"), got[0].Key)
	require.Equal(t, keyed.Body, got[0].Value)
	require.Equal(t, []kgo.RecordHeader{
		{Key: "Event-Type", Value: []byte("payment.captured")},
		{Key: "Trace", Value: []byte("t")},
		{Key: dedupfranz.HeaderMessageID, Value: []byte(keyed.ID)},
	}, got[0].Headers)
	require.Nil(t, got[1].Key, "no ordering key, no record key")
	require.Equal(t, []kgo.RecordHeader{{Key: dedupfranz.HeaderMessageID, Value: []byte(keyless.ID)}}, got[1].Headers)
}

// TestOutboxPublisherClient: the clients NewOutboxPublisher refuses, and
// the acknowledgement the one it takes asks of the broker on the wire: all
// in-sync replicas (acks -1).
func TestOutboxPublisherClient(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	cluster := startCluster(t, 2, topic)
	addrs := cluster.ListenAddrs()
	_, err := dedupfranz.NewOutboxPublisher(nil)
	require.ErrorIs(t, err, dedup.ErrInvalidConfig, "nil")
	for name, opts := range map[string][]kgo.Opt{
		"acks leader":   {kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite()},
		"acks none":     {kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite()},
		"group":         {kgo.ConsumerGroup("g"), kgo.ConsumeTopics(topic)},
		"transactional": {kgo.TransactionalID("tx")},
	} {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...)}, opts...)...)
		require.NoError(t, err, name)
		_, err = dedupfranz.NewOutboxPublisher(cl)
		require.ErrorIs(t, err, dedup.ErrInvalidConfig, name)
		cl.Close()
	}

	var mu sync.Mutex
	acks := map[int16]int{}
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		mu.Lock()
		acks[req.(*kmsg.ProduceRequest).Acks]++
		mu.Unlock()
		return nil, nil, false
	})
	p := newOutboxPublisher(t, outboxClient(t, addrs))
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	var msgs []outbox.Message
	for i := range 10 {
		msgs = append(msgs, outbox.Message{ID: strconv.Itoa(i), Destination: topic, OrderingKey: strconv.Itoa(i), Body: []byte("x")})
	}
	require.NoError(t, p.Publish(ctx, msgs))
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, acks)
	require.Len(t, acks, 1)
	require.Contains(t, acks, int16(-1), "every produce request asks for all in-sync replicas")
}

// TestOutboxPublisherReportsEach: partition 1's leader (broker 1) holds
// its produce requests until the test lets them through: the messages of
// partition 0 (broker 0) are reported acknowledged while PublishEach still
// waits, each as its promise is called, and partition 1's once written.
func TestOutboxPublisherReportsEach(t *testing.T) {
	t.Parallel()
	cluster, _, release := holdingBroker(t)
	p := newOutboxPublisher(t, outboxClient(t, cluster.ListenAddrs(), kgo.RecordPartitioner(keyDigitPartitioner())))
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	msgs := []outbox.Message{
		{ID: "1", Destination: "a", OrderingKey: "1-x", Body: []byte("x")},
		{ID: "2", Destination: "a", OrderingKey: "0-x", Body: []byte("x")},
		{ID: "3", Destination: "a", OrderingKey: "0-y", Body: []byte("x")},
	}
	r := outboxtest.NewReports(t, len(msgs))
	reports := make(chan int, len(msgs))
	done := make(chan error, 1)
	go func() {
		done <- p.PublishEach(ctx, msgs, func(i int, err error) {
			r.Ack(i, err)
			reports <- i
		})
	}()
	first := []int{testenv.Recv(t, reports, "a report"), testenv.Recv(t, reports, "a second report")}
	require.ElementsMatch(t, []int{1, 2}, first, "the messages of partition 0, while partition 1's produce is held")
	select {
	case err := <-done:
		t.Fatalf("PublishEach returned (%v) before partition 1's message was written", err)
	case i := <-reports:
		t.Fatalf("message %d reported while its produce is held", i)
	default:
	}
	release()
	require.NoError(t, testenv.Recv(t, done, "PublishEach to return"))
	require.Equal(t, 0, testenv.Recv(t, reports, "the third report"))
	require.Equal(t, map[int]error{0: nil, 1: nil, 2: nil}, r.Done(), "each acknowledged")
	got, err := readTopic(ctx, cluster.ListenAddrs(), "a", 3)
	require.NoError(t, err)
	require.Len(t, got, 3)
}

// TestOutboxPublisherContextEnds: PublishEach's context ends while
// partition 1's produce request is held at its broker: it returns the context's error, having
// reported partition 0's messages, and reports nothing after it returned,
// although the held message is written once the broker goes on.
func TestOutboxPublisherContextEnds(t *testing.T) {
	t.Parallel()
	cluster, arrived, release := holdingBroker(t)
	p := newOutboxPublisher(t, outboxClient(t, cluster.ListenAddrs(), kgo.RecordPartitioner(keyDigitPartitioner())))
	msgs := []outbox.Message{
		{ID: "1", Destination: "a", OrderingKey: "0-x", Body: []byte("x")},
		{ID: "2", Destination: "a", OrderingKey: "1-x", Body: []byte("x")},
	}
	r := outboxtest.NewReports(t, len(msgs))
	reported := make(chan int, len(msgs))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- p.PublishEach(ctx, msgs, func(i int, err error) {
			r.Ack(i, err)
			reported <- i
		})
	}()
	require.Equal(t, 0, testenv.Recv(t, reported, "partition 0's report"))
	testenv.Recv(t, arrived, "partition 1's produce request at its broker")
	cancel()
	require.ErrorIs(t, testenv.Recv(t, done, "PublishEach to return"), context.Canceled)
	require.Equal(t, map[int]error{0: nil}, r.Done(), "partition 1's message not reported")
	release()
	wait, cancelWait := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancelWait()
	got, err := readTopic(wait, cluster.ListenAddrs(), "a", 2)
	require.NoError(t, err)
	require.Len(t, got, 2, "kgo had sent it: the broker stored it")
	require.Empty(t, reported, "nothing reported after PublishEach returned") // Reports fails the test on one, too
}

// TestOutboxPublisherPartitionRefused: partition 1's leader refuses every
// produce request with InvalidRecord: its messages are reported failed,
// each alone and not for good (the broker's refusal of a batch does not
// say which record), those of partition 0 acknowledged.
func TestOutboxPublisherPartitionRefused(t *testing.T) {
	t.Parallel()
	cluster := twoBrokers(t)
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if cluster.CurrentNode() != 1 {
			return nil, nil, false
		}
		return produceError(req.(*kmsg.ProduceRequest), kerr.InvalidRecord), nil, true
	})
	p := newOutboxPublisher(t, outboxClient(t, cluster.ListenAddrs(), kgo.RecordPartitioner(keyDigitPartitioner())))
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	msgs := []outbox.Message{
		{ID: "1", Destination: "a", OrderingKey: "0-x", Body: []byte("x")},
		{ID: "2", Destination: "a", OrderingKey: "1-x", Body: []byte("x")},
		{ID: "3", Destination: "a", OrderingKey: "0-y", Body: []byte("x")},
		{ID: "4", Destination: "a", OrderingKey: "1-y", Body: []byte("x")},
	}
	r := outboxtest.NewReports(t, len(msgs))
	require.NoError(t, p.PublishEach(ctx, msgs, r.Ack))
	errs := r.Done()
	require.Len(t, errs, len(msgs))
	for i, failed := range []bool{false, true, false, true} {
		if !failed {
			require.NoError(t, errs[i], "message %d", i)
			continue
		}
		require.ErrorIs(t, errs[i], kerr.InvalidRecord, "message %d", i)
		require.NotErrorIs(t, errs[i], outbox.ErrPermanent, "message %d", i)
		require.ErrorContains(t, errs[i], `topic "a"`, "message %d", i)
	}
	err := p.Publish(ctx, msgs)
	require.Equal(t, []bool{true, false, true, false}, outbox.Acknowledged(err, len(msgs)), "%v", err)
}

// TestOutboxPublisherTooLarge: a message over the client's
// ProducerBatchMaxBytes fails alone, for good (kerr.MessageTooLarge); the
// others are produced.
func TestOutboxPublisherTooLarge(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	addrs := startCluster(t, 1, topic).ListenAddrs()
	p := newOutboxPublisher(t, outboxClient(t, addrs, kgo.ProducerBatchMaxBytes(1<<10)))
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	msgs := []outbox.Message{
		{ID: "1", Destination: topic, Body: []byte("small")},
		{ID: "2", Destination: topic, Body: bytes.Repeat([]byte("x"), 2<<10)},
		{ID: "3", Destination: topic, Body: []byte("small")},
	}
	err := p.Publish(ctx, msgs)
	require.Equal(t, []bool{true, false, true}, outbox.Acknowledged(err, len(msgs)), "%v", err)
	require.ErrorIs(t, err, kerr.MessageTooLarge)
	require.ErrorIs(t, err, outbox.ErrPermanent, "a message over the limit is refused for good")
	got, err := readTopic(ctx, addrs, topic, 2)
	require.NoError(t, err)
	require.Len(t, got, 2)
}

// TestOutboxPublisherClose: Close flushes what is in flight and closes
// the client; a call after it fails with io.ErrClosedPipe, and a second
// Close reports the one close.
func TestOutboxPublisherClose(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	addrs := startCluster(t, 1, topic).ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.MetadataMinAge(50*time.Millisecond))
	require.NoError(t, err)
	p, err := dedupfranz.NewOutboxPublisher(cl)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	msgs := []outbox.Message{{ID: "1", Destination: topic, Body: []byte("x")}}
	require.NoError(t, p.Publish(ctx, msgs))
	require.NoError(t, p.Close(ctx))
	require.NoError(t, p.Close(ctx), "closed once")
	require.ErrorIs(t, p.Publish(ctx, msgs), io.ErrClosedPipe)
	require.ErrorIs(t, p.PublishEach(ctx, msgs, func(int, error) { t.Error("a report after Close") }), io.ErrClosedPipe)
}

// TestOutboxPublisherDedupedDownstream: the same outbox message produced
// twice (a relay that publishes it again after a crash) reaches the next
// Consumer twice, keyed on its Message-Id header: the handler runs once.
func TestOutboxPublisherDedupedDownstream(t *testing.T) {
	t.Parallel()
	const topic = "payments"
	addrs := startCluster(t, 1, topic).ListenAddrs()
	p := newOutboxPublisher(t, outboxClient(t, addrs))
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	captured := outbox.Message{ID: outbox.MessageID("billing:o-1", "payment-captured"), Destination: topic,
		OrderingKey: "o-1", Body: []byte(`{"id":"o-1","cents":100}`)}
	other := outbox.Message{ID: outbox.MessageID("billing:o-2", "payment-captured"), Destination: topic,
		OrderingKey: "o-2", Body: []byte(`{"id":"o-2","cents":200}`)}
	require.NoError(t, p.Publish(ctx, []outbox.Message{captured, other}))
	require.NoError(t, p.Publish(ctx, []outbox.Message{captured}))

	handled := newEffects()
	settled := make(chan delivery.Reason, 3)
	cfg := fastConfig("shipping")
	cfg.Observer = adaptertest.OnSettled(func(e delivery.Event) { settled <- e.Decision.Reason })
	rcv, err := dedup.NewReceiver(newStore(t), idstrategy.MessageHeader[Order](dedupfranz.HeaderMessageID),
		func(_ context.Context, m *dedup.Message[Order]) (Receipt, error) {
			id, _ := m.HeaderValue(dedupfranz.HeaderMessageID)
			handled.add(m.Partition, id)
			return Receipt{OrderID: m.Body.ID}, nil
		}, cfg)
	require.NoError(t, err)
	c, err := dedupfranz.NewConsumer(clientOpts(addrs), "shipping", []string{topic}, rcv, &dedupfranz.Options{DropPoison: true})
	require.NoError(t, err)
	start(t, c)
	reasons := map[delivery.Reason]int{}
	for range 3 {
		reasons[testenv.Recv(t, settled, "a delivery settled")]++
	}
	require.Equal(t, map[delivery.Reason]int{"processed": 2, "duplicate": 1}, reasons)
	handled.ExactlyOnce(captured.ID, other.ID).Check(t)
}

// outboxClient returns a producing client for an outbox publisher: kgo's
// defaults (all in-sync replicas, idempotent, keys hashed) but for short
// metadata ages and retry backoffs, so that an unknown topic fails within
// a second or so; closed at the end of the test.
func outboxClient(t testing.TB, addrs []string, extra ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(addrs...),
		kgo.MetadataMinAge(50 * time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 20 * time.Millisecond }),
	}, extra...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

func newOutboxPublisher(t testing.TB, cl *kgo.Client) *dedupfranz.OutboxPublisher {
	t.Helper()
	p, err := dedupfranz.NewOutboxPublisher(cl)
	require.NoError(t, err)
	return p
}

// keyDigitPartitioner puts a record in the partition its key's first
// digit names (0 without a key).
func keyDigitPartitioner() kgo.Partitioner {
	return kgo.BasicConsistentPartitioner(func(string) func(*kgo.Record, int) int {
		return func(r *kgo.Record, n int) int {
			if len(r.Key) == 0 {
				return 0
			}
			return int(r.Key[0]-'0') % n
		}
	})
}

// twoBrokers starts a cluster of two brokers with a topic "a" of two
// partitions, partition 0 led by broker 0 and partition 1 by broker 1: a
// produce request to broker 1 carries partition 1's records alone.
func twoBrokers(t testing.TB) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.SeedTopics(2, "a"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	for p := range int32(2) {
		require.NoError(t, c.MoveTopicPartition("a", p, p))
		require.Equal(t, p, c.LeaderFor("a", p))
	}
	return c
}

// holdingBroker is twoBrokers whose broker 1 holds every produce request
// (kgo gives produce requests a connection of their own, so the rest goes
// on) until release is called, then handles them as usual; arrived gets a
// value as each reaches it. release is called at the end of the test too.
func holdingBroker(t testing.TB) (c *kfake.Cluster, arrived <-chan struct{}, release func()) {
	t.Helper()
	c = twoBrokers(t)
	released := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(released) }) }
	t.Cleanup(release) // before the cluster's Close (cleanups run last first)
	arrivals := make(chan struct{}, 16)
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if c.CurrentNode() == 1 {
			select {
			case arrivals <- struct{}{}:
			default:
			}
			c.SleepControl(func() { <-released })
		}
		return nil, nil, false
	})
	return c, arrivals, release
}

// produceError is the response to req failing each of its partitions with
// code.
func produceError(req *kmsg.ProduceRequest, code *kerr.Error) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID // v13 names topics by id
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.ErrorCode = code.Code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// readTopic waits until topic holds at least n records, then reads every
// record it holds, partition after partition, each in offset order.
func readTopic(ctx context.Context, addrs []string, topic string, n int) ([]*kgo.Record, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var ends map[int32]int64
	for {
		if ends, err = topicEnds(ctx, cl, topic); err != nil {
			return nil, err
		}
		total := int64(0)
		for _, end := range ends {
			total += end
		}
		if total >= int64(n) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s holds %d of %d records: %w", topic, total, n, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	offsets := map[int32]kgo.Offset{}
	left := 0
	for p, end := range ends {
		if end > 0 {
			offsets[p] = kgo.NewOffset().AtStart()
			left += int(end)
		}
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets})
	byPart := map[int32][]*kgo.Record{}
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < ends[r.Partition] {
				byPart[r.Partition] = append(byPart[r.Partition], r)
				left--
			}
		})
	}
	var out []*kgo.Record
	for p := range int32(len(ends)) {
		out = append(out, byPart[p]...)
	}
	return out, nil
}

// topicEnds returns each partition's end offset of topic, through cl.
func topicEnds(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, error) {
	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	meta.Topics = append(meta.Topics, mt)
	mresp, err := meta.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	if len(mresp.Topics) != 1 {
		return nil, fmt.Errorf("metadata of %s: %d topics", topic, len(mresp.Topics))
	}
	if err := kerr.ErrorForCode(mresp.Topics[0].ErrorCode); err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for _, mp := range mresp.Topics[0].Partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = mp.Partition, -1 // the end
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	ends := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("end of %s/%d: %w", topic, p.Partition, err)
			}
			ends[p.Partition] = p.Offset
		}
	}
	return ends, nil
}
