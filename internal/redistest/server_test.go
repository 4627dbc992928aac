package redistest

import (
	"net"
	"testing"

	"github.com/dedup-go/dedup/internal/testenv"
)

// TestStartOnFreeRetriesATakenPort: a port taken between its choice and
// the server's bind (as a client connection may take it) is given up at
// once for another one, instead of failing the test after 15 s of PINGs.
func TestStartOnFreeRetriesATakenPort(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	calls := 0
	s := startOnFree(t, func(t testing.TB) int {
		calls++
		if calls == 1 {
			return taken
		}
		return testenv.FreePort(t)
	}, nil)
	if s.port == taken || calls != 2 {
		t.Fatalf("started on %d after %d choices; %d was taken", s.port, calls, taken)
	}
}
