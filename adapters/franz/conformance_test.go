package dedupfranz_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter/adaptertest"
	dedupfranz "github.com/dedup-go/dedup/adapters/franz"
	"github.com/dedup-go/dedup/delivery"
)

// TestConformance runs package adapter's conformance suite against the
// Consumer on an in-process cluster (kfake), each subtest on a topic and a
// dead-letter topic of its own, read by a consumer group of its own.
// Retries are in place. Kafka carries no producer's message id. Not
// parallel: the suite's NoLeaks looks at every goroutine.
func TestConformance(t *testing.T) {
	addrs := startCluster(t, 1).ListenAddrs()
	var sources atomic.Int64
	adaptertest.Run(t, adaptertest.Harness{
		NoMessageID:      true,
		IgnoreGoroutines: []string{kfakeReads},
		NewSource: func(t *testing.T) adaptertest.Source {
			topic := fmt.Sprintf("conformance-%d", sources.Add(1))
			dlq := topic + ".dlq"
			createTopics(t, addrs, 1, topic, dlq)
			prod := newProducer(t, addrs)
			return adaptertest.Source{
				Name: topic,
				Publish: func(ctx context.Context, m adaptertest.Message) error {
					r := &kgo.Record{Topic: topic, Value: m.Data}
					for k, v := range m.Header {
						r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
					}
					return prod.ProduceSync(ctx, r).FirstErr()
				},
				NewConsumer: func(rcv *dedup.Receiver[*dedup.Message[adaptertest.Order], adaptertest.Receipt]) (dedup.Consumer, error) {
					return dedupfranz.NewConsumer(clientOpts(addrs), "group-"+topic, []string{topic}, rcv,
						&dedupfranz.Options{DeadLetterTopic: dlq, CommitInterval: 10 * time.Millisecond})
				},
				DeadLetters: func(ctx context.Context, want int) ([]adaptertest.DeadLetter, error) {
					cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(dlq), kgo.FetchMaxWait(50*time.Millisecond))
					if err != nil {
						return nil, err
					}
					defer cl.Close()
					var out []adaptertest.DeadLetter
					for len(out) < want {
						fs := cl.PollFetches(ctx)
						if err := ctx.Err(); err != nil {
							return out, err
						}
						fs.EachRecord(func(r *kgo.Record) {
							h := delivery.MapHeader{}
							for _, kh := range r.Headers {
								h[kh.Key] = append(h[kh.Key], string(kh.Value))
							}
							out = append(out, adaptertest.DeadLetter{Header: h, Data: r.Value})
						})
					}
					return out, nil
				},
			}
		}})
}
