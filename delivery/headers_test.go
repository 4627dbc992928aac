package delivery_test

import (
	"testing"

	"github.com/dedup-go/dedup/delivery"
)

func TestLookupHeaderReadsFormerNames(t *testing.T) {
	cases := []struct {
		name   string
		h      delivery.MapHeader
		lookup string
		want   string
		found  bool
	}{
		{"current", delivery.MapHeader{"Dedup-Source": {"orders"}}, delivery.HeaderSource, "orders", true},
		{"NATS 0.1 subject", delivery.MapHeader{"Dedup-Subject": {"orders.eu"}}, delivery.HeaderSource, "orders.eu", true},
		{"RabbitMQ 0.1 queue", delivery.MapHeader{"Dedup-Queue": {"q"}}, delivery.HeaderSource, "q", true},
		{"Kafka 0.1 topic", delivery.MapHeader{"Dedup-Topic": {"t"}}, delivery.HeaderSource, "t", true},
		{"current wins", delivery.MapHeader{"Dedup-Source": {"new"}, "Dedup-Topic": {"old"}}, delivery.HeaderSource, "new", true},
		{"NATS 0.1 sequence", delivery.MapHeader{"Dedup-Sequence": {"42"}}, delivery.HeaderOffset, "42", true},
		{"NATS 0.1 consumer", delivery.MapHeader{"Dedup-Consumer": {"c"}}, delivery.HeaderConsumerGroup, "c", true},
		{"Kafka 0.1 group", delivery.MapHeader{"Dedup-Group": {"g"}}, delivery.HeaderConsumerGroup, "g", true},
		{"NATS 0.1 msg id", delivery.MapHeader{"Dedup-Msg-Id": {"m1"}}, delivery.HeaderOriginalMessageID, "m1", true},
		{"Kafka 0.1 message id", delivery.MapHeader{"Dedup-Message-Id": {"m2"}}, delivery.HeaderOriginalMessageID, "m2", true},
		{"no former name", delivery.MapHeader{"Dedup-Topic": {"t"}}, delivery.HeaderKey, "", false},
		{"absent", delivery.MapHeader{}, delivery.HeaderSource, "", false},
	}
	for _, c := range cases {
		got, ok := delivery.LookupHeader(c.h, c.lookup)
		if got != c.want || ok != c.found {
			t.Errorf("%s: LookupHeader(%v, %q) = %q, %v; want %q, %v", c.name, c.h, c.lookup, got, ok, c.want, c.found)
		}
	}
	if _, ok := delivery.LookupHeader(nil, delivery.HeaderSource); ok {
		t.Error("a nil Header has no header")
	}
}
