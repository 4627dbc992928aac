package dedupkafka_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedup-go/dedup"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

// TestGroupCommit: under CommitEveryOutcome, the partitions whose
// watermarks move while a commit is on its way go out together, in one
// OffsetCommit, once it ended; and each delivery is settled with what the
// commit that took its watermark came to. The first commit is held until
// every partition has a watermark; the next (all of kafka-go's tries of it)
// fails: the partitions it carried are settled with ErrCommit and not
// counted as acked, and the ticker commits them later.
func TestGroupCommit(t *testing.T) {
	t.Parallel()
	const topic, group = "orders", "billing"
	cluster := startCluster(t, partitions, topic)
	brokers := cluster.ListenAddrs()
	produceOrders(t, brokers, topic, partitions) // one order a partition

	var (
		mu      sync.Mutex
		commits [][]int32 // the partitions of each OffsetCommit, in order
	)
	release := make(chan struct{}) // lets the first commit through
	const groupTries = 3           // kafka-go's tries of a failed commit (defaultCommitRetries)
	cluster.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		r := req.(*kmsg.OffsetCommitRequest)
		var ps []int32
		for _, rt := range r.Topics {
			for _, rp := range rt.Partitions {
				ps = append(ps, rp.Partition)
			}
		}
		slices.Sort(ps)
		mu.Lock()
		commits = append(commits, ps)
		n := len(commits)
		mu.Unlock()
		switch {
		case n == 1:
			cluster.SleepControl(func() { <-release })
			return nil, nil, false // then committed as usual
		case n <= 1+groupTries:
			resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
			for _, rt := range r.Topics {
				st := kmsg.NewOffsetCommitResponseTopic()
				st.Topic = rt.Topic
				for _, rp := range rt.Partitions {
					sp := kmsg.NewOffsetCommitResponseTopicPartition()
					sp.Partition, sp.ErrorCode = rp.Partition, kerr.RequestTimedOut.Code
					st.Partitions = append(st.Partitions, sp)
				}
				resp.Topics = append(resp.Topics, st)
			}
			return resp, nil, true
		}
		return nil, nil, false
	})

	var smu sync.Mutex
	settled := map[int]error{} // partition -> SettleErr of its order's delivery
	cfg := fastConfig("billing")
	cfg.Observer = onSettled(func(e delivery.Event) {
		smu.Lock()
		defer smu.Unlock()
		settled[e.Partition] = e.SettleErr
	})
	s, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(s, idstrategy.BodyField("id", func(o Order) string { return o.ID }),
		func(context.Context, *dedup.Message[Order]) (Receipt, error) { return Receipt{}, nil }, cfg)
	require.NoError(t, err)
	c, err := dedupkafka.NewConsumer(newReader(t, brokers, group, topic), rcv,
		&dedupkafka.Options{DropPoison: true, CommitInterval: dedupkafka.CommitEveryOutcome})
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)

	eventually(t, 30*time.Second, func() bool { return dedupkafka.Marked(c) == partitions },
		"every partition has a watermark while the first commit is held")
	close(release)
	eventually(t, 30*time.Second, func() bool {
		smu.Lock()
		defer smu.Unlock()
		return len(settled) == partitions
	}, "every order settled")

	mu.Lock()
	first, group1 := commits[0], commits[1]
	tries := slices.Clone(commits[1 : 1+groupTries])
	mu.Unlock()
	require.Equal(t, partitions, len(first)+len(group1),
		"the partitions that moved while the first commit (%v) was on its way go out together in the next (%v)", first, group1)
	for _, try := range tries {
		require.Equal(t, group1, try, "kafka-go tries the same commit again")
	}
	smu.Lock()
	for _, p := range first {
		require.NoError(t, settled[int(p)], "partition %d: its commit was made", p)
	}
	for _, p := range group1 {
		require.ErrorIs(t, settled[int(p)], dedupkafka.ErrCommit, "partition %d: settled with what the commit that took its watermark came to", p)
	}
	smu.Unlock()
	st := c.Stats()
	require.Equal(t, uint64(len(first)), st.Acked, "an ack whose commit failed is not counted")
	require.Equal(t, uint64(1), st.SettleFailures, "one failed OffsetCommit")

	eventually(t, 30*time.Second, func() bool {
		got, err := fetchCommitted(t, brokers, group, topic, partitions)
		if err != nil {
			return false
		}
		for p, end := range endOffsets(t, brokers, topic, partitions) {
			if got[p] != end {
				return false
			}
		}
		return true
	}, "the ticker commits what the failed commit carried")
}
