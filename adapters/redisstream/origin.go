package dedupredisstream

import (
	"crypto/rand"
	"encoding/binary"
	"net"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup/delivery"
)

// origin is what a Consumer knows of its deliveries and no entry carries:
// the server (a single client's address; unknown for a Cluster, whose
// streams live on several), the group and the destination's template.
type origin struct {
	host, group, template string
	port                  int
}

func newOrigin(client redis.UniversalClient, group, template, stream string) *origin {
	o := &origin{group: group, template: template}
	if o.template == "" {
		o.template = stream
	}
	if c, ok := client.(*redis.Client); ok {
		if h, p, err := net.SplitHostPort(c.Options().Addr); err == nil {
			o.host = h
			o.port, _ = strconv.Atoi(p)
		}
	}
	return o
}

func (o *origin) fill(d delivery.Origin) delivery.Origin {
	d.ServerAddress, d.ServerPort = o.host, o.port
	d.ConsumerGroup = o.group
	d.DestinationTemplate = o.template
	return d
}

func randUint() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}
