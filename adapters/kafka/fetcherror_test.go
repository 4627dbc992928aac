package dedupkafka_test

import (
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
)

// TestFetchErrorIsNotTheEnd: kafka-go's FetchMessage returns the errors
// its reader goes on from (a partition's fetch that failed with a Kafka
// error, a consumer-group join that failed MaxAttempts times), once each,
// and keeps fetching and rejoining by itself. The consumer logs such an
// error at warning level and fetches again: it does not stop, which would
// leave its member in the group, holding its partitions with nobody
// handling them. The broker fails one Fetch with KAFKA_STORAGE_ERROR, or
// ends the generation (a heartbeat answered REBALANCE_IN_PROGRESS) and
// refuses the next joins (COORDINATOR_NOT_AVAILABLE) as often as kafka-go
// tries; the order written afterwards is handled and committed.
func TestFetchErrorIsNotTheEnd(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"fetch", "join"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			const topic, group = "orders", "billing"
			cluster := startCluster(t, 1, topic)
			brokers := cluster.ListenAddrs()
			cfg := readerConfig(brokers, group, topic)
			var armed atomic.Bool
			var injected atomic.Int32
			want := int32(1)
			switch how {
			case "fetch":
				failFetchOnce(cluster, topic, &armed, &injected)
			case "join":
				want = int32(cfg.MaxAttempts)
				if want == 0 {
					want = 3 // kafka-go's default
				}
				failJoins(cluster, &armed, &injected, want)
			}
			w := newWriter(t, brokers)
			produce(t, w, topic, []kafka.Message{{Value: orderJSON(t, Order{ID: orderID(0)})}})

			var logs lockedBuffer
			fx := newEffects()
			r := kafka.NewReader(cfg)
			t.Cleanup(func() { _ = r.Close() })
			c, err := dedupkafka.NewConsumer(r, orderReceiverWith(t, fastConfig("billing"), fx), &dedupkafka.Options{
				DropPoison: true, CommitInterval: dedupkafka.CommitEveryOutcome, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			})
			require.NoError(t, err)
			require.NoError(t, c.Start(t.Context()))
			stopAtCleanup(t, c)
			eventually(t, 30*time.Second, func() bool { return committedTo(t, brokers, group, topic, 1) }, "the first order committed")

			armed.Store(true)
			eventually(t, 30*time.Second, func() bool { return injected.Load() == want }, "the broker's refusals")
			produce(t, w, topic, []kafka.Message{{Value: orderJSON(t, Order{ID: orderID(1)})}})
			require.True(t, waitUntil(30*time.Second, func() bool { return committedTo(t, brokers, group, topic, 2) }),
				"the order written after the failure was not committed; the consumer's Err: %v; its log:\n%s", c.Err(), logs.String())
			require.NoError(t, c.Err())
			require.Equal(t, 2, fx.Len())
			require.Contains(t, logs.String(), `level=WARN msg="dedupkafka: fetching failed`)
			require.NotContains(t, logs.String(), "level=ERROR")
		})
	}
}

// failFetchOnce makes the cluster answer the first Fetch of topic once
// armed with KAFKA_STORAGE_ERROR for each of its partitions, counting it in
// injected.
func failFetchOnce(cluster *kfake.Cluster, topic string, armed *atomic.Bool, injected *atomic.Int32) {
	cluster.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		r := req.(*kmsg.FetchRequest)
		if !armed.Load() || injected.Load() > 0 {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range r.Topics {
			if rt.Topic != topic {
				return nil, nil, false
			}
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.KafkaStorageError.Code
				sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		injected.Add(1)
		return resp, nil, true
	})
}

// failJoins makes the cluster, once armed, end the group's generation (a
// heartbeat answered REBALANCE_IN_PROGRESS) and refuse the next times
// JoinGroups with COORDINATOR_NOT_AVAILABLE, counting them in injected.
func failJoins(cluster *kfake.Cluster, armed *atomic.Bool, injected *atomic.Int32, times int32) {
	var ended atomic.Bool
	cluster.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if !armed.Load() || !ended.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.RebalanceInProgress.Code
		return resp, nil, true
	})
	cluster.ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if !ended.Load() || injected.Load() >= times {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		injected.Add(1)
		return resp, nil, true
	})
}

// waitUntil reports whether cond became true within d, polling it.
func waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
