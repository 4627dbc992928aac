package dedupkafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter/adaptertest"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/delivery"
)

// TestConformance runs package adapter's conformance suite against the
// Consumer on an in-process cluster (kfake), each subtest on a topic and a
// dead-letter topic of its own, read by a consumer group of its own.
// Retries are in place: a retry topic is read by a Consumer of its own,
// which the suite's one consumer per source does not make. Kafka carries
// no producer's message id. Not parallel: the suite's NoLeaks looks at
// every goroutine.
func TestConformance(t *testing.T) {
	brokers := startKafka(t, 1)
	var sources atomic.Int64
	adaptertest.Run(t, adaptertest.Harness{
		NoMessageID: true,
		// kfake reads each request of a connection on a goroutine of its
		// own: a publish on the harness's writer starts one.
		IgnoreGoroutines: []string{"github.com/twmb/franz-go/pkg/kfake.(*clientConn).read.func1"},
		NewSource: func(t *testing.T) adaptertest.Source {
			topic := fmt.Sprintf("conformance-%d", sources.Add(1))
			dlq := topic + ".dlq"
			admin := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: closedAtCleanup(t)}
			resp, err := admin.CreateTopics(t.Context(), &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{
				{Topic: topic, NumPartitions: 1, ReplicationFactor: 1},
				{Topic: dlq, NumPartitions: 1, ReplicationFactor: 1},
			}})
			if err != nil {
				t.Fatal(err)
			}
			for name, err := range resp.Errors {
				if err != nil {
					t.Fatalf("create topic %s: %v", name, err)
				}
			}
			w := newWriter(t, brokers)
			return adaptertest.Source{
				Name: topic,
				Publish: func(ctx context.Context, m adaptertest.Message) error {
					km := kafka.Message{Topic: topic, Value: m.Data}
					for k, v := range m.Header {
						km.Headers = append(km.Headers, kafka.Header{Key: k, Value: []byte(v)})
					}
					return w.WriteMessages(ctx, km)
				},
				NewConsumer: func(rcv *dedup.Receiver[*dedup.Message[adaptertest.Order], adaptertest.Receipt]) (dedup.Consumer, error) {
					r := kafka.NewReader(readerConfig(brokers, "group-"+topic, topic))
					c, err := dedupkafka.NewConsumer(r, rcv, &dedupkafka.Options{DeadLetterTopic: dlq, CommitInterval: 10 * time.Millisecond})
					if err != nil {
						return nil, errors.Join(err, r.Close())
					}
					return &readerCloser{Consumer: c, r: r, stopped: make(chan struct{})}, nil
				},
				DeadLetters: func(ctx context.Context, want int) ([]adaptertest.DeadLetter, error) {
					r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: dlq, Partition: 0, MaxWait: 50 * time.Millisecond})
					defer r.Close()
					var out []adaptertest.DeadLetter
					for len(out) < want {
						m, err := r.ReadMessage(ctx)
						if err != nil {
							return out, err
						}
						h := delivery.MapHeader{}
						for _, kh := range m.Headers {
							h[kh.Key] = append(h[kh.Key], string(kh.Value))
						}
						out = append(out, adaptertest.DeadLetter{Header: h, Data: m.Value})
					}
					return out, nil
				},
			}
		}})
}

// readerCloser is a Consumer that closes its reader, the caller's (the
// harness's), once it stopped, so that the suite finds none of the
// reader's goroutines left after Stop.
type readerCloser struct {
	*dedupkafka.Consumer[adaptertest.Order, adaptertest.Receipt]
	r       *kafka.Reader
	stopped chan struct{}
}

func (c *readerCloser) Start(ctx context.Context) error {
	if err := c.Consumer.Start(ctx); err != nil {
		return err
	}
	go func() {
		<-c.Consumer.Stopped()
		_ = c.r.Close()
		close(c.stopped)
	}()
	return nil
}

func (c *readerCloser) Stop(ctx context.Context) error {
	if err := c.Consumer.Stop(ctx); err != nil {
		return err
	}
	select {
	case <-c.stopped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *readerCloser) Stopped() <-chan struct{} { return c.stopped }
