package dedupfranz

import (
	"net"
	"strconv"

	"github.com/dedup-go/dedup/delivery"
)

// origin returns what completes the Origin of the consumer's deliveries
// (see adapter.WithOrigin): the consumer group, the first seed broker as
// the server (a fetch's broker is the partition leader, which the record
// does not name: the seed is the one the client bootstraps from), and
// Options.DestinationTemplate.
func (c *Consumer[T, R]) origin(seeds []string) func(delivery.Origin) delivery.Origin {
	var host string
	var port int
	if len(seeds) > 0 {
		if h, p, err := net.SplitHostPort(seeds[0]); err == nil {
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
