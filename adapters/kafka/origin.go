package dedupkafka

import (
	"net"
	"strconv"

	"github.com/dedup-go/dedup/delivery"
	"github.com/segmentio/kafka-go"
)

// origin returns what completes the Origin of the consumer's deliveries
// (see adapter.WithOrigin): the reader's GroupID as the consumer group, its
// first broker as the server (kafka-go does not say which broker served a
// fetch: the first is the one the reader bootstraps from), and
// Options.DestinationTemplate.
func (c *Consumer[T, R]) origin(cfg kafka.ReaderConfig) func(delivery.Origin) delivery.Origin {
	var host string
	var port int
	if len(cfg.Brokers) > 0 {
		if h, p, err := net.SplitHostPort(cfg.Brokers[0]); err == nil {
			host = h
			port, _ = strconv.Atoi(p)
		}
	}
	group, template := c.group, c.opts.DestinationTemplate
	return func(o delivery.Origin) delivery.Origin {
		o.ServerAddress, o.ServerPort, o.ConsumerGroup, o.DestinationTemplate = host, port, group, template
		return o
	}
}
