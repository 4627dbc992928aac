package dedupamqp_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter/adaptertest"
	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
)

// TestConformance runs package adapter's conformance suite against the
// Consumer on the shared RabbitMQ, each subtest on a throwaway queue with
// its dead-letter exchange and queue: retries in place, and retries
// through a retry tier. Not parallel: the suite's NoLeaks looks at every
// goroutine.
func TestConformance(t *testing.T) {
	url := testenv.RabbitMQ.Addr(t)
	for _, tc := range []struct {
		name  string
		tiers []time.Duration
	}{
		{"InPlace", nil},
		{"RetryTier", []time.Duration{100 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			adaptertest.Run(t, adaptertest.Harness{RetryLater: tc.tiers != nil, NewSource: func(t *testing.T) adaptertest.Source {
				top := declare(t, url, dedupamqp.Topology{RetryTiers: tc.tiers})
				conn := dial(t, url)
				pub := channel(t, conn)
				if err := pub.Confirm(false); err != nil {
					t.Fatal(err)
				}
				get := channel(t, conn)
				return adaptertest.Source{
					Name: top.Queue,
					Publish: func(ctx context.Context, m adaptertest.Message) error {
						return conformancePublish(ctx, pub, top.Queue, m)
					},
					NewConsumer: func(rcv *dedup.Receiver[*dedup.Message[adaptertest.Order], adaptertest.Receipt]) (dedup.Consumer, error) {
						opts := top.Options()
						if tc.tiers != nil {
							opts.InPlaceRetryMax = time.Millisecond // every retry goes through the tier
						}
						return dedupamqp.NewConsumer(url, top.Queue, rcv, opts)
					},
					DeadLetters: func(ctx context.Context, want int) ([]adaptertest.DeadLetter, error) {
						return conformanceLetters(ctx, get, top.DeadLetterQueue, want)
					},
				}
			}})
		})
	}
}

// conformancePublish publishes m to queue, persistent, and waits for the
// broker's confirm.
func conformancePublish(ctx context.Context, ch *amqp.Channel, queue string, m adaptertest.Message) error {
	p := amqp.Publishing{Body: m.Data, MessageId: m.ID, DeliveryMode: amqp.Persistent}
	if len(m.Header) > 0 {
		p.Headers = amqp.Table{}
		for k, v := range m.Header {
			p.Headers[k] = v
		}
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, p)
	if err != nil {
		return err
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("the broker nacked the publish to %s", queue)
	}
	return nil
}

// conformanceLetters reads want messages of the dead-letter queue
// (basic.get, acknowledged), polling until ctx ends.
func conformanceLetters(ctx context.Context, ch *amqp.Channel, queue string, want int) ([]adaptertest.DeadLetter, error) {
	var out []adaptertest.DeadLetter
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for len(out) < want {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			return out, err
		}
		if ok {
			out = append(out, adaptertest.DeadLetter{Header: tableHeader(d.Headers), Data: d.Body})
			continue
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
	return out, nil
}

// tableHeader is an AMQP table as a delivery.Header, its values as text.
func tableHeader(t amqp.Table) delivery.Header {
	h := delivery.MapHeader{}
	for k, v := range t {
		h[k] = []string{fmt.Sprint(v)}
	}
	return h
}
