package redistest

import (
	"context"
	"net"
	"os/exec"
	"strconv"
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
}

// StartServer starts a redis-server on a free loopback port, keeping
// nothing on disk unless extra options say so; it is killed when t ends.
func StartServer(t testing.TB, extra ...string) *Server {
	t.Helper()
	return StartServerOn(t, testenv.FreePort(t), extra...)
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
		s.t.Fatalf("redistest: start redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.Stop()
			s.t.Fatalf("redistest: redis-server on %s did not answer within 15s: %v (log: %s/redis.log)", s.Addr(), err, s.dir)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	_ = s.cmd.Wait()
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
