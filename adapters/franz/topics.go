package dedupfranz

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedup-go/dedup/adapter"
)

// checkTopics checks the retry topics and the dead-letter topic, and
// compares the topics' retention with the receiver's, through a client of
// the caller's options (no group), closed on return.
func (c *Consumer[T, R]) checkTopics(ctx context.Context) error {
	cl, err := kgo.NewClient(c.kopts...)
	if err != nil {
		return &configError{ErrClientConfig, "dedupfranz: the kgo options are refused: " + err.Error()}
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, c.opts.SettleTimeout)
	defer cancel()
	if len(c.opts.RetryTopics) > 0 {
		if problem := checkRetryTopics(cctx, cl, c.topics, c.opts.RetryTopics, c.rcv.Retention()); problem != "" {
			return &configError{ErrRetryTopics, "dedupfranz: " + problem}
		}
	}
	if c.opts.DeadLetterTopic != "" {
		if _, problem := describeTopics(cctx, cl, "dead-letter topic", []string{c.opts.DeadLetterTopic}); problem != "" {
			return &configError{ErrDeadLetterTopic, "dedupfranz: " + problem}
		}
	}
	reset, _ := cl.OptValue(kgo.ConsumeResetOffset).(kgo.Offset)
	retentions, err := topicRetentions(cctx, cl, c.topics)
	problem := ""
	if err != nil {
		problem = "the horizon check could not read the topics' retention: " + err.Error()
	} else {
		problem = checkHorizon(reset.EpochOffset().Offset == -1, retentions, c.rcv.Retention())
	}
	if problem == "" {
		return nil
	}
	if c.opts.StrictHorizon {
		return &configError{ErrHorizon, "dedupfranz: " + problem}
	}
	c.opts.Logger.WarnContext(ctx, "dedupfranz: "+problem)
	return nil
}

// checkRetryTopics checks, for each topic read, that its retry topics
// exist and keep records at least as long as their tier, and that the
// receiver keeps failed records (and their attempt counts) at least as long
// as the longest tier. It returns a description of the problem, or "".
func checkRetryTopics(ctx context.Context, cl *kgo.Client, topics []string, tiers []time.Duration, retention time.Duration) string {
	longest := tiers[len(tiers)-1]
	if retention < longest {
		return fmt.Sprintf("the receiver keeps records for %v, less than the longest retry tier %v: a record back from its retry topic would find its attempt count gone and could be retried forever, or run again after it succeeded elsewhere; raise dedup.Config.Retention or shorten the tiers", retention, longest)
	}
	var names []string
	tierOf := map[string]time.Duration{}
	for _, t := range topics {
		base := retryBase(t, tiers)
		for _, tier := range tiers {
			name := adapter.RetryName(base, tier)
			if _, ok := tierOf[name]; !ok {
				names = append(names, name)
				tierOf[name] = tier
			}
		}
	}
	retentions, problem := describeTopics(ctx, cl, "retry topic", names)
	if problem != "" {
		return problem
	}
	for _, name := range names {
		if r := retentions[name]; r >= 0 && r < tierOf[name] {
			return fmt.Sprintf("the retry topic %q keeps records for %v, less than its tier %v: a record could be deleted before it is due", name, r, tierOf[name])
		}
	}
	return ""
}

// describeTopics returns the retention of each of the topics, which must
// exist, of the given kind ("retry topic", "dead-letter topic"). It returns
// a description of the problem, naming the topics, or "".
func describeTopics(ctx context.Context, cl *kgo.Client, kind string, names []string) (map[string]time.Duration, string) {
	retentions, err := topicRetentions(ctx, cl, names)
	if err != nil {
		quoted := make([]string, len(names))
		for i, n := range names {
			quoted[i] = strconv.Quote(n)
		}
		what := "the " + kind + " " + quoted[0] + " must exist (create it"
		if len(names) > 1 {
			what = "the " + kind + "s " + strings.Join(quoted, ", ") + " must exist (create them"
		}
		return nil, fmt.Sprintf("%s like the topics read; the Consumer creates no topic): %v", what, err)
	}
	for _, name := range names {
		if _, ok := retentions[name]; !ok {
			return nil, fmt.Sprintf("the %s %q did not answer with its retention.ms; create it", kind, name)
		}
	}
	return retentions, ""
}

// topicRetentions returns the retention.ms of each topic (-1 for
// unlimited).
func topicRetentions(ctx context.Context, cl *kgo.Client, topics []string) (map[string]time.Duration, error) {
	req := kmsg.NewPtrDescribeConfigsRequest()
	for _, t := range topics {
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType = kmsg.ConfigResourceTypeTopic
		r.ResourceName = t
		r.ConfigNames = []string{"retention.ms"}
		req.Resources = append(req.Resources, r)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("dedupfranz: describe topic configs: %w", err)
	}
	out := make(map[string]time.Duration, len(topics))
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return nil, fmt.Errorf("dedupfranz: describe the config of topic %q: %w", r.ResourceName, err)
		}
		for _, e := range r.Configs {
			if e.Name != "retention.ms" || e.Value == nil {
				continue
			}
			ms, err := strconv.ParseInt(*e.Value, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("dedupfranz: topic %q has retention.ms %q: %w", r.ResourceName, *e.Value, err)
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

// horizon returns how long after it was written a record may still be
// read again by the consumer group, for a group that resets to the end of
// a partition (atEnd: kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
// or to its start (kgo's default), on a topic whose retention.ms is
// retention (-1 for unlimited). It reports false when the horizon is
// unbounded.
//
// A group that resets to the start and has no committed offset for a
// partition (its offsets expired, the group was deleted or reset) reads the
// partition again from its first retained record: the horizon is the
// topic's retention. A group that resets to the end re-reads only as far
// back as the last commit: the horizon is the commit lag, reported as 0.
func horizon(atEnd bool, retention time.Duration) (time.Duration, bool) {
	if atEnd {
		return 0, true
	}
	if retention < 0 {
		return 0, false
	}
	return retention, true
}

// checkHorizon compares each topic's horizon with the receiver's retention.
// It returns a description of the problem, or "".
func checkHorizon(atEnd bool, retentions map[string]time.Duration, retention time.Duration) string {
	for topic, r := range retentions {
		h, ok := horizon(atEnd, r)
		switch {
		case !ok:
			return fmt.Sprintf("topic %q keeps records forever (retention.ms -1) and the group resets to the start, so a group that loses its committed offsets re-reads records older than the receiver's retention %v and runs them again; reset to the end (kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd())) or bound the topic's retention", topic, retention)
		case h > retention:
			return fmt.Sprintf("topic %q keeps records for %v and the group resets to the start, so a group that loses its committed offsets re-reads records older than the receiver's retention %v and runs them again; make the retention at least %v or reset to the end (kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))", topic, h, retention, h)
		}
	}
	return ""
}
