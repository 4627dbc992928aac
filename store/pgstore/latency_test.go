package pgstore_test

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// latencyProxy forwards TCP connections to a target, each byte delivered
// half a round trip after it was read, in each direction: a link between
// two zones, on loopback. A standby that streams through it lags its
// primary by that much. Cut drops what is in flight, as a partition or the
// death of the primary's host does (a process that dies on a live host
// still has what it wrote delivered).
type latencyProxy struct {
	ln     net.Listener
	target string
	delay  time.Duration // one way: half the round trip

	mu     sync.Mutex
	conns  []net.Conn
	closed bool // by close or Cut: nothing more is accepted or delivered
	wg     sync.WaitGroup
}

// startLatencyProxy listens on a free loopback port and forwards to
// target with round trip rtt; it is closed when t ends.
func startLatencyProxy(t testing.TB, target string, rtt time.Duration) *latencyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &latencyProxy{ln: ln, target: target, delay: rtt / 2}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// Port is the port clients connect to.
func (p *latencyProxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

func (p *latencyProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c, up) {
			return
		}
		p.wg.Go(func() { p.pump(up, c) })
		p.wg.Go(func() { p.pump(c, up) })
	}
}

// track records conns to close with the proxy; false when it is closed.
func (p *latencyProxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	p.conns = append(p.conns, conns...)
	return true
}

// chunk is bytes read at a time.
type chunk struct {
	b  []byte
	at time.Time
}

// pump copies src to dst, each chunk written p.delay after it was read,
// in order. When either side ends, both are closed.
func (p *latencyProxy) pump(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	chunks := make(chan chunk, 1024)
	p.wg.Go(func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- chunk{buf[:n], time.Now()}
			}
			if err != nil {
				return
			}
		}
	})
	for c := range chunks {
		time.Sleep(time.Until(c.at.Add(p.delay)))
		if p.isClosed() {
			_ = src.Close()
			for range chunks {
			}
			return
		}
		if _, err := dst.Write(c.b); err != nil {
			_ = src.Close() // ends the reader
			for range chunks {
			}
			return
		}
	}
}

func (p *latencyProxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// Cut stops accepting and closes every connection, dropping the bytes in
// flight.
func (p *latencyProxy) Cut() {
	_ = p.ln.Close()
	p.mu.Lock()
	conns := p.conns
	p.conns, p.closed = nil, true
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// close cuts the link and waits for its goroutines.
func (p *latencyProxy) close() {
	p.Cut()
	p.wg.Wait()
}
