package dedupkafka

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
)

// horizon returns how long after it was written a message may still be
// read again by a consumer group, for a reader starting at startOffset
// (ReaderConfig.StartOffset) on a topic whose retention.ms is retention (-1
// for unlimited). It reports false when the horizon is unbounded.
//
// With kafka.FirstOffset (kafka-go's default), a group that has no
// committed offset for a partition (its offsets expired under the broker's
// offsets.retention.minutes, the group was deleted or reset) reads the
// partition again from its first retained message: the horizon is the
// topic's retention. With kafka.LastOffset such a group skips to the end
// instead, and re-reads go back only as far as the last commit (a crash, a
// rebalance): the horizon is the commit lag, which the Consumer keeps to
// Options.CommitInterval plus the time a message is retried in place, so
// it is reported as 0.
//
// A duplicate of a completed message read after the receiver's retention
// runs the handler again, so the retention must be at least this.
func horizon(startOffset int64, retention time.Duration) (time.Duration, bool) {
	if startOffset == kafka.LastOffset {
		return 0, true
	}
	if retention < 0 {
		return 0, false
	}
	return retention, true
}

// topicRetentions returns the retention.ms of each topic.
func topicRetentions(ctx context.Context, client *kafka.Client, topics []string) (map[string]time.Duration, error) {
	req := &kafka.DescribeConfigsRequest{}
	for _, t := range topics {
		req.Resources = append(req.Resources, kafka.DescribeConfigRequestResource{
			ResourceType: kafka.ResourceTypeTopic, ResourceName: t, ConfigNames: []string{"retention.ms"},
		})
	}
	resp, err := client.DescribeConfigs(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("dedupkafka: describe topic configs: %w", err)
	}
	out := make(map[string]time.Duration, len(topics))
	for _, r := range resp.Resources {
		if r.Error != nil {
			return nil, fmt.Errorf("dedupkafka: describe the config of topic %q: %w", r.ResourceName, r.Error)
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName != "retention.ms" {
				continue
			}
			ms, err := strconv.ParseInt(e.ConfigValue, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("dedupkafka: topic %q has retention.ms %q: %w", r.ResourceName, e.ConfigValue, err)
			}
			if ms < 0 {
				out[r.ResourceName] = -1
			} else {
				out[r.ResourceName] = time.Duration(ms) * time.Millisecond
			}
		}
	}
	return out, nil
}

// checkHorizon compares each topic's horizon with the receiver's retention.
// It returns a description of the problem, or "".
func checkHorizon(startOffset int64, retentions map[string]time.Duration, retention time.Duration) string {
	for topic, r := range retentions {
		h, ok := horizon(startOffset, r)
		switch {
		case !ok:
			return fmt.Sprintf("topic %q keeps messages forever (retention.ms -1) and the reader starts at the first offset, so a group that loses its committed offsets re-reads messages older than the receiver's retention %v and runs them again; start at kafka.LastOffset or bound the topic's retention", topic, retention)
		case h > retention:
			return fmt.Sprintf("topic %q keeps messages for %v and the reader starts at the first offset, so a group that loses its committed offsets re-reads messages older than the receiver's retention %v and runs them again; make the retention at least %v or start at kafka.LastOffset", topic, h, retention, h)
		}
	}
	return ""
}
