package dedupnats

import (
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/dedup-go/dedup/delivery"
	natsgo "github.com/nats-io/nats.go"
)

// origin is what a Consumer or Subscriber knows of its deliveries and no
// message carries: the server its connection is connected to, its
// consumer group and the destination's template. Its fill completes each
// delivery's delivery.Origin (see adapter.WithOrigin).
type origin struct {
	server    *connServer
	group     string
	templates templates
}

func (o *origin) fill(d delivery.Origin) delivery.Origin {
	s := o.server.current()
	d.ServerAddress, d.ServerPort = s.host, s.port
	d.ConsumerGroup = o.group
	d.DestinationTemplate = o.templates.of(d.Source)
	return d
}

// connServer reports the server a connection is connected to. The
// connection's URL is parsed once per server: it changes only when the
// connection reconnects to another, which the server's id tells cheaply.
type connServer struct {
	nc   *natsgo.Conn
	last atomic.Pointer[server]
}

type server struct {
	id, host string
	port     int
}

// current returns the server nc is connected to; while it reconnects,
// the last one it was connected to (the one the delivery came from).
func (c *connServer) current() *server {
	id := c.nc.ConnectedServerId()
	last := c.last.Load()
	if last != nil && (id == "" || id == last.id) {
		return last
	}
	s := &server{id: id}
	if u, err := url.Parse(c.nc.ConnectedUrl()); err == nil {
		s.host = u.Hostname()
		s.port, _ = strconv.Atoi(u.Port())
	}
	if id != "" {
		c.last.Store(s)
	}
	return s
}

// templates names a subject by the pattern it matches: the one pattern,
// or among several the first that matches, else fallback.
type templates struct {
	patterns []string
	fallback string
}

// subjectTemplates returns the templates of a consumer's subjects: the
// one given (Options.DestinationTemplate), else the patterns, else
// fallback.
func subjectTemplates(given string, patterns []string, fallback string) templates {
	switch {
	case given != "":
		return templates{fallback: given}
	case len(patterns) == 1:
		return templates{fallback: patterns[0]}
	}
	return templates{patterns: patterns, fallback: fallback}
}

func (t *templates) of(subject string) string {
	for _, p := range t.patterns {
		if p == subject || strings.ContainsAny(p, "*>") && subjectMatches(p, subject) {
			return p
		}
	}
	return t.fallback
}
