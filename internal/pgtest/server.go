// Package pgtest gives tests a PostgreSQL server of their own, which they
// may kill, start again, clone and promote: the shared server is never
// stopped.
package pgtest

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/dedup-go/dedup/internal/testenv"
)

const installPostgres = "scripts/services.sh postgres (apt-get install postgresql)"

// Server is a PostgreSQL server of the test's own, on a free loopback
// port. Its data lives in a folder of its own that the postgres user owns,
// since PostgreSQL refuses to run as root.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
}

// Start runs initdb and starts the server; it is stopped and its folder
// removed when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := New(t)
	s.Run("initdb", "-D", s.Data(), "-U", "postgres", "-A", "trust", "--no-sync", "--no-instructions")
	s.Start()
	return s
}

// New makes the folder and picks the port of a server whose data
// directory is still to be made (by initdb, or pg_basebackup for a
// standby: Run it into Data); it is stopped and its folder removed when t
// ends. It skips t when PostgreSQL's programs are not installed (fails it
// under DEDUP_TEST_REQUIRE=1).
func New(t testing.TB) *Server {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		msg := "initdb is not installed in /usr/lib/postgresql/*/bin: install it with " + installPostgres
		if testenv.Required() {
			t.Fatalf("%s; DEDUP_TEST_REQUIRE=1, so this fails instead of skipping", msg)
		}
		t.Skip(msg)
	}
	slices.Sort(bins)
	dir, err := os.MkdirTemp("", "pgtest-server-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	s := &Server{t: t, bin: filepath.Dir(bins[len(bins)-1]), dir: dir, port: testenv.FreePort(t)}
	t.Cleanup(func() {
		s.stop()
		_ = os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("pgtest: PostgreSQL refuses to run as root, and there is no postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	return s
}

// Port is the server's loopback port.
func (s *Server) Port() int { return s.port }

// Data is the server's data directory.
func (s *Server) Data() string { return filepath.Join(s.dir, "data") }

// DSN is the server's connection string.
func (s *Server) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// Start starts the server and waits until it accepts connections.
func (s *Server) Start() {
	s.t.Helper()
	s.Run("pg_ctl", "-D", s.Data(), "-l", filepath.Join(s.dir, "log"), "-w", "-t", "60",
		"-o", fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1", s.port, s.dir), "start")
}

// Kill stops the server at once, as a crash would: no checkpoint, the next
// start recovers from the write-ahead log.
func (s *Server) Kill() {
	s.t.Helper()
	s.Run("pg_ctl", "-D", s.Data(), "-m", "immediate", "-w", "stop")
}

// Promote makes a standby a primary and waits until it is one.
func (s *Server) Promote() {
	s.t.Helper()
	s.Run("pg_ctl", "-D", s.Data(), "-w", "-t", "60", "promote")
}

func (s *Server) stop() {
	_ = s.command("pg_ctl", "-D", s.Data(), "-m", "immediate", "-w", "stop").Run()
}

// Run runs one of PostgreSQL's programs (initdb, pg_ctl, pg_basebackup,
// pg_isready ...), as the postgres user when the test runs as root, and
// fails t, with the server's log, when it fails.
func (s *Server) Run(name string, args ...string) {
	s.t.Helper()
	if out, err := s.command(name, args...).CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		s.t.Fatalf("pgtest: %s %v: %v\n%s\n%s", name, args, err, out, log)
	}
}

// Ready reports whether the server accepts connections (pg_isready).
func (s *Server) Ready() bool {
	return s.command("pg_isready", "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(s.port)).Run() == nil
}

// command runs a program of the server's, as the postgres user when the
// test runs as root.
func (s *Server) command(name string, args ...string) *exec.Cmd {
	path := filepath.Join(s.bin, name)
	if os.Geteuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}
