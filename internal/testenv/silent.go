package testenv

import (
	"net"
	"sync"
	"testing"
)

// SilentServer listens on a free loopback port and accepts connections
// without ever answering, as a server that hangs (or a network that drops
// every packet) would. It returns the address; the listener and every
// connection are closed when t ends.
func SilentServer(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: silent server: %v", err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		Wait(t, &wg, "the silent server's accept loop to end")
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}
