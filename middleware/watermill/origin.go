package dedupwatermill

import (
	"iter"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/dedup-go/dedup/delivery"
)

// BrokerWatermill is the Origin.Broker of the middleware's events.
const BrokerWatermill = "watermill"

// Origin is the message's origin, for the receiver's Observer: Broker
// "watermill", Source (and DestinationTemplate) the topic the handler
// subscribes to, ConsumerGroup the handler's name, MessageID the UUID,
// Header the metadata.
func (c *call) Origin() delivery.Origin {
	ctx := c.msg.Context()
	topic := message.SubscribeTopicFromCtx(ctx)
	return delivery.Origin{
		Broker:              BrokerWatermill,
		Source:              topic,
		DestinationTemplate: topic,
		ConsumerGroup:       message.HandlerNameFromCtx(ctx),
		MessageID:           c.msg.UUID,
		Header:              metadataHeader(c.msg.Metadata),
	}
}

var _ delivery.Originer = (*call)(nil)

// metadataHeader is a message's metadata as a delivery.Header.
type metadataHeader message.Metadata

// Get returns the value of name.
func (h metadataHeader) Get(name string) (string, bool) {
	v, ok := h[name]
	return v, ok
}

// All yields every name and value.
func (h metadataHeader) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for k, v := range h {
			if !yield(k, v) {
				return
			}
		}
	}
}
