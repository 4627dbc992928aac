package dedupkafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

// TestOffsetGapsCommitToEnd consumes a compacted topic, whose offsets have
// gaps where superseded records were removed: every remaining record is
// handled, and a clean stop commits the partition to its end, not to the
// number of records handled.
func TestOffsetGapsCommitToEnd(t *testing.T) {
	t.Parallel()
	const topic, group = "accounts", "billing"
	cluster := startCluster(t, 1)
	brokers := cluster.ListenAddrs()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: closedAtCleanup(t)}
	resp, err := client.CreateTopics(t.Context(), &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic: topic, NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "cleanup.policy", ConfigValue: "compact"}},
	}}})
	require.NoError(t, err)
	require.NoError(t, resp.Errors[topic])

	// 200 records in 20 batches (compaction keeps the last batch whole):
	// odd ones under a key of their own, even ones all under one key, of
	// which compaction keeps the last.
	w := newWriter(t, brokers)
	for b := range 20 {
		var msgs []kafka.Message
		for i := b * 10; i < b*10+10; i++ {
			key := fmt.Sprintf("acct-%03d", i)
			if i%2 == 0 {
				key = "acct-hot"
			}
			msgs = append(msgs, kafka.Message{Key: []byte(key), Value: orderJSON(t, Order{ID: orderID(i), Cents: i})})
		}
		produce(t, w, topic, msgs)
	}
	cluster.Compact()
	end := endOffsets(t, brokers, topic, 1)[0]
	require.EqualValues(t, 200, end)

	var mu sync.Mutex
	var offsets []int64
	s, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(s, idstrategy.TopicPartitionOffset[Order](),
		func(_ context.Context, m *dedup.Message[Order]) (struct{}, error) {
			mu.Lock()
			offsets = append(offsets, m.Offset)
			mu.Unlock()
			return struct{}{}, nil
		}, fastConfig("billing"))
	require.NoError(t, err)
	c, err := dedupkafka.NewConsumer(newReader(t, brokers, group, topic), rcv, &dedupkafka.Options{DropPoison: true, BatchSize: 8})
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)
	eventually(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(offsets) > 0 && offsets[len(offsets)-1] == end-1
	}, "the last record handled")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(ctx))

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, offsets, 95+1+10, "compaction left the odd records, the last hot one and the last batch")
	require.Greater(t, offsets[1]-offsets[0], int64(1), "the offsets have gaps")
	require.Equal(t, map[int]int64{0: end}, committed(t, brokers, group, topic, 1))
}
