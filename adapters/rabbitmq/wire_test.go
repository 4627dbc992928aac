package dedupamqp_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/memstore"
)

// method is one basic.* method a client sent, as the broker read it.
type method struct {
	name                            string
	multiple, requeue, global, mand bool
	prefetch                        int
}

// sniffer forwards AMQP connections to the broker and records the basic.*
// methods the clients send: which acknowledgement, with which flags. A
// RabbitMQ 3.10 counts Nack and Reject alike, so the choice between them
// (which RabbitMQ 4 tells apart) is checked on the wire.
//
// It also times each delivery: when the broker sent it (basic.deliver) and
// when the client first settled it (ack, nack or reject).
type sniffer struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	seen   []method
	sent   map[deliveryID]time.Time
	held   map[deliveryID]time.Duration // from basic.deliver to the settlement
	wg     sync.WaitGroup
}

// deliveryID names a delivery: its tag on a channel of a connection.
type deliveryID struct {
	conn    int
	channel uint16
	tag     uint64
}

func startSniffer(t *testing.T, target string) *sniffer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &sniffer{ln: ln, target: target, sent: map[deliveryID]time.Time{}, held: map[deliveryID]time.Duration{}}
	var conns []net.Conn
	var n int
	var cmu sync.Mutex
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			cmu.Lock()
			conns = append(conns, c, up)
			n++
			id := n
			cmu.Unlock()
			s.wg.Go(func() { s.read(io.TeeReader(up, c), id, true); _ = c.Close() })
			s.wg.Go(func() { s.read(io.TeeReader(c, up), id, false); _ = up.Close() })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		cmu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		cmu.Unlock()
		s.wg.Wait()
	})
	return s
}

// read parses the frames of one direction of connection conn (the
// client's start with the protocol header): type, channel, size, payload
// and end octet. Reading r forwards them.
func (s *sniffer) read(r io.Reader, conn int, fromServer bool) {
	br := bufio.NewReader(r)
	defer func() { _, _ = io.Copy(io.Discard, br) }() // keep forwarding
	if !fromServer {
		if _, err := io.ReadFull(br, make([]byte, 8)); err != nil {
			return
		}
	}
	head := make([]byte, 7)
	for {
		if _, err := io.ReadFull(br, head); err != nil {
			return
		}
		size := binary.BigEndian.Uint32(head[3:])
		payload := make([]byte, size+1)
		if _, err := io.ReadFull(br, payload); err != nil {
			return
		}
		if head[0] == 1 && size >= 4 {
			ch := binary.BigEndian.Uint16(head[1:])
			if fromServer {
				s.deliver(payload[:size], deliveryID{conn: conn, channel: ch})
			} else {
				s.method(payload[:size], deliveryID{conn: conn, channel: ch})
			}
		}
	}
}

// deliver records when the broker sent a delivery.
func (s *sniffer) deliver(p []byte, id deliveryID) {
	if binary.BigEndian.Uint16(p) != 60 || binary.BigEndian.Uint16(p[2:]) != 60 {
		return
	}
	a := p[4:]
	tag := int(a[0])
	id.tag = binary.BigEndian.Uint64(a[1+tag:])
	s.mu.Lock()
	s.sent[id] = time.Now()
	s.mu.Unlock()
}

// longestUnsettled is the longest a delivery stayed unsettled, from
// basic.deliver to its ack, nack or reject.
func (s *sniffer) longestUnsettled() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out time.Duration
	for _, d := range s.held {
		out = max(out, d)
	}
	return out
}

func (s *sniffer) method(p []byte, did deliveryID) {
	class, id := binary.BigEndian.Uint16(p), binary.BigEndian.Uint16(p[2:])
	if class != 60 {
		return
	}
	a := p[4:]
	if id == 80 || id == 90 || id == 120 { // ack, reject, nack
		did.tag = binary.BigEndian.Uint64(a)
		s.mu.Lock()
		if at, ok := s.sent[did]; ok {
			s.held[did] = time.Since(at)
			delete(s.sent, did)
		}
		s.mu.Unlock()
	}
	var m method
	switch id {
	case 10:
		m = method{name: "qos", prefetch: int(binary.BigEndian.Uint16(a[4:])), global: a[6]&1 != 0}
	case 40:
		ex := int(a[2])
		rk := int(a[3+ex])
		m = method{name: "publish", mand: a[4+ex+rk]&1 != 0}
	case 80:
		m = method{name: "ack", multiple: a[8]&1 != 0}
	case 90:
		m = method{name: "reject", requeue: a[8]&1 != 0}
	case 120:
		m = method{name: "nack", multiple: a[8]&1 != 0, requeue: a[8]&2 != 0}
	default:
		return
	}
	s.mu.Lock()
	s.seen = append(s.seen, m)
	s.mu.Unlock()
}

func (s *sniffer) methods(name string) []method {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []method
	for _, m := range s.seen {
		if m.name == name {
			out = append(out, m)
		}
	}
	return out
}

// TestWireMethods checks on the wire what the consumer sends: a per-channel
// Qos, Ack without multiple, Reject with requeue after a handler failure
// (which RabbitMQ 4 counts towards a quorum queue's delivery limit), no
// Nack for a copy whose key is in flight elsewhere (it is held in place
// until the holder finishes: RabbitMQ before 4.0 counts a Nack towards the
// delivery limit too), and mandatory publishes for dead letters.
func TestWireMethods(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	uri, err := amqp.ParseURI(url)
	require.NoError(t, err)
	sn := startSniffer(t, net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port)))
	host, port, _ := net.SplitHostPort(sn.ln.Addr().String())
	uri.Host = host
	uri.Port, _ = strconv.Atoi(port)
	top := declare(t, url, dedupamqp.Topology{})
	conn := dial(t, url)

	release := make(chan struct{})
	var failed sync.Once
	handler := func(_ context.Context, m *dedup.Message[Order]) (struct{}, error) {
		switch m.Body.ID {
		case "slow":
			<-release
		case "flaky":
			var fail bool
			failed.Do(func() { fail = true })
			if fail {
				return struct{}{}, context.DeadlineExceeded // the handler's own timeout: a handler error
			}
		}
		return struct{}{}, nil
	}
	store, err := memstore.New(nil)
	require.NoError(t, err)
	var ev events
	cfg := fastConfig("wire")
	cfg.NoWait = true // a copy of the slow order in flight is refused at once
	cfg.Observer = &ev
	rcv, err := dedup.NewReceiver(store, idstrategy.BodyField("id", func(o Order) string { return o.ID }), handler, cfg)
	require.NoError(t, err)
	opts := top.Options()
	opts.InPlaceRetryMax = 20 * time.Millisecond
	c, err := dedupamqp.NewConsumer(uri.String(), top.Queue, rcv, opts)
	require.NoError(t, err)
	publishAll(t, conn, top.Queue, []amqp.Publishing{
		{MessageId: "1", Body: orderJSON(t, Order{ID: "slow"})},
		{MessageId: "2", Body: orderJSON(t, Order{ID: "slow"})},
		{MessageId: "3", Body: orderJSON(t, Order{ID: "flaky"})},
		{MessageId: "4", Body: []byte("poison")},
	})
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)
	eventually(t, "the copy refused as in flight", func() bool { return ev.reasons()[delivery.ReasonInFlight] >= 1 })
	close(release)
	eventually(t, "every order settled", func() bool {
		r := ev.reasons()
		return r[delivery.ReasonProcessed] == 2 && r[delivery.ReasonDuplicate] == 1 && r[delivery.ReasonUndecodable] == 1
	})
	require.NoError(t, c.Stop(t.Context()))

	qos := sn.methods("qos")
	require.Len(t, qos, 1)
	require.Equal(t, method{name: "qos", prefetch: dedupamqp.DefaultConcurrency}, qos[0], "per channel, never global")
	acks := sn.methods("ack")
	require.Len(t, acks, 4, "processed twice, a duplicate, a dead letter's original")
	for _, a := range acks {
		require.False(t, a.multiple)
	}
	require.Equal(t, []method{{name: "reject", requeue: true}}, sn.methods("reject"), "a handler failure is returned with Reject")
	require.Empty(t, sn.methods("nack"), "the copy in flight was held in place, never returned to the queue")
	require.Equal(t, 1, ev.reasons()[delivery.ReasonDuplicate], "the held copy became a duplicate once its original finished")
	require.Equal(t, []method{{name: "publish", mand: true}}, sn.methods("publish"), "the dead letter, mandatory")
}
