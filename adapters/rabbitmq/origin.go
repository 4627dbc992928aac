package dedupamqp

import (
	"net"
	"strconv"

	"github.com/dedup-go/dedup/delivery"
	amqp "github.com/rabbitmq/amqp091-go"
)

// server is a broker's host and port, for the Origin of deliveries.
type server struct {
	host string
	port int
}

// urlServer is the server of NewConsumer's url when the Consumer dials it
// itself (no Options.Dial): its host as the user named it, which the
// messaging conventions prefer to the IP address the connection reached.
func urlServer(url string, dial Dialer) server {
	if url == "" || dial != nil {
		return server{}
	}
	u, err := amqp.ParseURI(url)
	if err != nil {
		return server{}
	}
	return server{host: u.Host, port: u.Port}
}

// dialOf is the Dial opts sets, if any.
func dialOf(opts *Options) Dialer {
	if opts == nil {
		return nil
	}
	return opts.Dial
}

// originOf returns what completes the Origin of a session's deliveries
// (see adapter.WithOrigin): the server its consuming connection is connected
// to (the url's host, else the connection's remote address), and
// Options.DestinationTemplate. No consumer group: the messaging
// conventions give RabbitMQ none (the consumers of a queue share its
// messages; the queue is the destination).
func (c *Consumer[T, R]) originOf(conn *amqp.Connection) func(delivery.Origin) delivery.Origin {
	s := c.server
	if s.host == "" && conn != nil {
		if host, port, err := net.SplitHostPort(conn.RemoteAddr().String()); err == nil {
			s.host = host
			s.port, _ = strconv.Atoi(port)
		}
	}
	template := c.opts.DestinationTemplate
	return func(o delivery.Origin) delivery.Origin {
		o.ServerAddress, o.ServerPort, o.DestinationTemplate = s.host, s.port, template
		return o
	}
}
