package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup/internal/testenv"
)

const installRedis = "scripts/services.sh redis (apt-get install redis-server)"

// Server is a redis-server of the test's own, on a loopback port, which the
// test may kill and start again (the shared Redis is never stopped).
type Server struct {
	t    testing.TB
	bin  string
	port int
	dir  string
	conf string // a configuration file, the first argument; "" for none
	args []string
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has exited and been waited for
}

// errPortInUse: the server could not bind its port (or, in a Cluster, its
// bus port), taken between the test's choice of it and the server's bind.
var errPortInUse = errors.New("redistest: the port is in use")

// startAttempts is how many free ports a server is tried on before a port
// race fails the test.
const startAttempts = 5

// StartServer starts a redis-server on a free loopback port, keeping
// nothing on disk unless extra options say so; it is killed when t ends.
func StartServer(t testing.TB, extra ...string) *Server {
	t.Helper()
	return startOnFree(t, testenv.FreePort, extra)
}

// startOnFree starts a server on a port that port chooses, choosing again
// when another process took it before the server could bind it (a client's
// connection is given such a port too).
func startOnFree(t testing.TB, port func(testing.TB) int, extra []string) *Server {
	t.Helper()
	for range startAttempts - 1 {
		s := newServer(t, port(t), extra)
		err := s.start()
		if err == nil {
			return s
		}
		if !errors.Is(err, errPortInUse) {
			t.Fatal(err)
		}
		t.Logf("%v: trying another", err)
	}
	s := newServer(t, port(t), extra)
	s.Start()
	return s
}

// StartServerOn is StartServer on the given port.
func StartServerOn(t testing.TB, port int, extra ...string) *Server {
	t.Helper()
	s := newServer(t, port, extra)
	s.Start()
	return s
}

// newServer prepares a server on port, killed when t ends, without
// starting it.
func newServer(t testing.TB, port int, extra []string) *Server {
	t.Helper()
	s := &Server{
		t:    t,
		bin:  testenv.Binary(t, "redis-server", installRedis),
		port: port,
		dir:  t.TempDir(),
		args: extra,
	}
	t.Cleanup(s.Stop)
	return s
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Start starts the server (again, on the same port and folder) and waits
// until it answers PING.
func (s *Server) Start() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatal(err)
	}
}

// start is Start, returning what kept the server from answering: a server
// that exited at once fails without waiting out the deadline, with
// errPortInUse when its log says its port was taken.
func (s *Server) start() error {
	var args []string
	if s.conf != "" {
		args = append(args, s.conf)
	}
	args = append(append(args,
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--logfile", "redis.log",
	), s.args...) // later options win
	s.cmd = exec.Command(s.bin, args...)
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start redis-server: %w", err)
	}
	done := make(chan struct{})
	s.done = done
	cmd := s.cmd
	go func() { // owned by the server: ends when the process does (Stop kills it)
		_ = cmd.Wait()
		close(done)
	}()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			s.cmd = nil
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			if bytes.Contains(log, []byte("Address already in use")) {
				return fmt.Errorf("%w: redis-server on %s exited: %s", errPortInUse, s.Addr(), lastLines(log, 3))
			}
			return fmt.Errorf("redistest: redis-server on %s exited before it answered: %s", s.Addr(), lastLines(log, 10))
		default:
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("redistest: redis-server on %s did not answer within 15s: %v (log: %s/redis.log)", s.Addr(), err, s.dir)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lastLines returns the last n lines of log.
func lastLines(log []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// StartWith starts the server again as Start does, with extra options
// added to those it was started with (later options win), for this and
// every later start.
func (s *Server) StartWith(extra ...string) {
	s.t.Helper()
	s.args = append(s.args, extra...)
	s.Start()
}

// Port is the server's port.
func (s *Server) Port() int { return s.port }

// Dir is the server's working folder, which holds its log (redis.log).
func (s *Server) Dir() string { return s.dir }

// Stop kills the server, as a crash would, and waits for it to exit.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Pause stops the server's process (SIGSTOP) without closing its
// connections: a Redis that hangs. Resume lets it go on; Stop kills it
// paused or not.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume lets a paused server go on (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	if s.cmd == nil || s.cmd.Process == nil {
		s.t.Fatal("redistest: the server is not running")
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redistest: signal %v: %v", sig, err)
	}
}

// FreePortPair returns a free loopback port whose port+offset is free too
// (a Cluster node's bus port is its port + 10000).
func FreePortPair(t testing.TB, offset int) int {
	t.Helper()
	for range 100 {
		port := testenv.FreePort(t)
		if port+offset > 65535 {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+offset))
		if err != nil {
			continue
		}
		_ = l.Close()
		return port
	}
	t.Fatalf("redistest: no free port pair %d apart", offset)
	return 0
}
