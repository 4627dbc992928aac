package dedupnats_test

import (
	"context"
	"fmt"
	"testing"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter/adaptertest"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/delivery"
)

// TestConformance runs package adapter's conformance suite against the
// JetStream Consumer and the core NATS Subscriber, on an embedded current
// nats-server. Not parallel: the suite's NoLeaks looks at every goroutine.
func TestConformance(t *testing.T) {
	url := embedded(t)
	t.Run("JetStream", func(t *testing.T) {
		adaptertest.Run(t, adaptertest.Harness{NewSource: jetStreamSource(url, false)})
	})
	// Without a dead-letter subject, poison is terminated and counted.
	t.Run("JetStreamDropPoison", func(t *testing.T) {
		adaptertest.Run(t, adaptertest.Harness{DropPoison: true, NewSource: jetStreamSource(url, true)})
	})
	// Core NATS does not redeliver: a retry of a plain message is a dead
	// letter (ReasonNoRedelivery), so the suite's retry and hard-stop rules
	// do not apply. Dead letters go to a stream.
	t.Run("Core", func(t *testing.T) {
		adaptertest.Run(t, adaptertest.Harness{NoRedelivery: true, NewSource: func(t *testing.T) adaptertest.Source {
			nc, js := connect(t, url)
			n := newNames()
			streams(t, js, n) // the subscriber's subject is the stream's too: harmless, it reads none of it
			core := n.subject + ".core"
			return adaptertest.Source{
				Name: core,
				Publish: func(ctx context.Context, m adaptertest.Message) error {
					if err := nc.PublishMsg(conformanceMsg(core, m)); err != nil {
						return err
					}
					return nc.FlushWithContext(ctx)
				},
				NewConsumer: func(rcv *dedup.Receiver[*dedup.Message[adaptertest.Order], adaptertest.Receipt]) (dedup.Consumer, error) {
					return dedupnats.NewSubscriber(nc, core, "", rcv, &dedupnats.Options{DeadLetterSubject: n.dlq})
				},
				DeadLetters: func(ctx context.Context, want int) ([]adaptertest.DeadLetter, error) {
					return conformanceLetters(ctx, nc, n.dlq, want)
				},
			}
		}})
	})
}

// conformanceMsg is m as a NATS message on subject, its id in Nats-Msg-Id.
func conformanceMsg(subject string, m adaptertest.Message) *natsgo.Msg {
	msg := natsgo.NewMsg(subject)
	msg.Data = m.Data
	for k, v := range m.Header {
		msg.Header.Set(k, v)
	}
	if m.ID != "" {
		msg.Header.Set(jetstream.MsgIDHeader, m.ID)
	}
	return msg
}

func conformancePublish(ctx context.Context, js jetstream.JetStream, subject string, m adaptertest.Message) error {
	_, err := js.PublishMsg(ctx, conformanceMsg(subject, m))
	return err
}

// conformanceLetters reads the first want messages of the stream that captures
// subject, waiting for them until ctx ends, with an ordered consumer of
// its own.
func conformanceLetters(ctx context.Context, nc *natsgo.Conn, subject string, want int) ([]adaptertest.DeadLetter, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	stream, err := js.StreamNameBySubject(ctx, subject)
	if err != nil {
		return nil, fmt.Errorf("the stream of %s: %w", subject, err)
	}
	c, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return nil, err
	}
	var out []adaptertest.DeadLetter
	for len(out) < want {
		m, err := c.Next(jetstream.FetchContext(ctx))
		if err != nil {
			return out, err
		}
		out = append(out, adaptertest.DeadLetter{Header: delivery.MapHeader(m.Headers()), Data: m.Data()})
	}
	return out, nil
}

// jetStreamSource makes each subtest's stream and consumer on the server at
// url: with a dead-letter subject, or, with dropPoison, without one.
func jetStreamSource(url string, dropPoison bool) func(t *testing.T) adaptertest.Source {
	return func(t *testing.T) adaptertest.Source {
		nc, js := connect(t, url)
		n := newNames()
		streams(t, js, n)
		cons := consumer(t, js, n, jetstream.ConsumerConfig{})
		opts := &dedupnats.Options{DeadLetterSubject: n.dlq}
		if dropPoison {
			opts = &dedupnats.Options{DropPoison: true}
		}
		src := adaptertest.Source{
			Name: n.subject,
			Publish: func(ctx context.Context, m adaptertest.Message) error {
				return conformancePublish(ctx, js, n.subject, m)
			},
			NewConsumer: func(rcv *dedup.Receiver[*dedup.Message[adaptertest.Order], adaptertest.Receipt]) (dedup.Consumer, error) {
				return dedupnats.NewConsumer(js, cons, rcv, opts)
			},
		}
		if !dropPoison {
			src.DeadLetters = func(ctx context.Context, want int) ([]adaptertest.DeadLetter, error) {
				return conformanceLetters(ctx, nc, n.dlq, want)
			}
		}
		return src
	}
}
