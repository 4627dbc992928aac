package pgstore_test

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// link forwards TCP connections to a target as the network between two
// hosts does: each byte is delivered half a round trip after it was read,
// in each direction. A standby that streams through it lags its primary
// by that much. When the target's host dies, its links go one of two ways
// (a process that dies on a live host is another matter: the bytes it
// wrote are still delivered, and its peers are refused at once):
//
//   - Cut: the connections break, the bytes in flight are lost (the
//     standby's replication link: it sees its primary go);
//   - Silence: nothing more is delivered either way and nothing is
//     closed, so a client waits for an answer until its own timeout, and
//     a new connection is accepted and never answered.
type link struct {
	ln     net.Listener
	target string
	delay  time.Duration // one way: half the round trip

	mu    sync.Mutex
	conns []net.Conn
	state linkState
	wg    sync.WaitGroup
}

type linkState int

const (
	linkUp linkState = iota
	linkSilent
	linkCut
)

// startLink listens on a free loopback port and forwards to target with
// round trip rtt (0: at once); it is cut when t ends.
func startLink(t testing.TB, target string, rtt time.Duration) *link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := &link{ln: ln, target: target, delay: rtt / 2}
	l.wg.Go(l.accept)
	t.Cleanup(l.close)
	return l
}

// Port is the port to connect to.
func (l *link) Port() int { return l.ln.Addr().(*net.TCPAddr).Port }

func (l *link) accept() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		if l.now() != linkUp {
			l.track(c) // held open, never answered
			continue
		}
		up, err := net.Dial("tcp", l.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !l.track(c, up) {
			return
		}
		l.wg.Go(func() { l.pump(up, c) })
		l.wg.Go(func() { l.pump(c, up) })
	}
}

// track records conns to close with the link; false when it is cut.
func (l *link) track(conns ...net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == linkCut {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	l.conns = append(l.conns, conns...)
	return true
}

func (l *link) now() linkState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
}

// chunk is bytes read at a time.
type chunk struct {
	b  []byte
	at time.Time
}

// pump copies src to dst, each chunk written l.delay after it was read,
// in order. When either side ends, both are closed, unless the link is
// silent: then nothing is written nor closed.
func (l *link) pump(dst, src net.Conn) {
	chunks := make(chan chunk, 1024)
	l.wg.Go(func() {
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
	broken := false
	for c := range chunks {
		time.Sleep(time.Until(c.at.Add(l.delay)))
		if broken || l.now() == linkSilent {
			continue // dropped
		}
		if _, err := dst.Write(c.b); err != nil || l.now() == linkCut {
			broken = true
			_ = src.Close() // ends the reader
		}
	}
	if l.now() != linkSilent {
		_ = src.Close()
		_ = dst.Close()
	}
}

// Silence makes the target's host vanish for whoever uses the link.
func (l *link) Silence() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == linkUp {
		l.state = linkSilent
	}
}

// Cut stops accepting and breaks every connection, losing the bytes in
// flight.
func (l *link) Cut() {
	_ = l.ln.Close()
	l.mu.Lock()
	conns := l.conns
	l.conns, l.state = nil, linkCut
	l.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// close cuts the link and waits for its goroutines.
func (l *link) close() {
	l.Cut()
	l.wg.Wait()
}
