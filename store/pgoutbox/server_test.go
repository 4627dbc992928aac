package pgoutbox_test

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

// (A copy of store/pgstore's test helper: test files do not cross
// modules.)
//
// pgServer is a PostgreSQL server of the test's own, on a free loopback
// port, which the test may stop and start again (the shared one is never
// stopped). Its data lives in a folder of its own that the postgres user
// owns, since PostgreSQL refuses to run as root.
type pgServer struct {
	t    testing.TB
	bin  string
	dir  string
	port int
}

// startPostgres runs initdb and starts the server; it is stopped and its
// folder removed when t ends.
func startPostgres(t testing.TB) *pgServer {
	t.Helper()
	s := newPGServer(t)
	s.run("initdb", "-D", s.data(), "-U", "postgres", "-A", "trust", "--no-sync", "--no-instructions")
	s.Start()
	return s
}

// newPGServer makes the folder and picks the port of a server whose data
// directory is still to be made (by initdb, or pg_basebackup for a
// standby); it is stopped and its folder removed when t ends.
func newPGServer(t testing.TB) *pgServer {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		msg := "initdb is not installed in /usr/lib/postgresql/*/bin: install it with scripts/services.sh postgres (apt-get install postgresql)"
		if testenv.Required() {
			t.Fatalf("%s; DEDUP_TEST_REQUIRE=1, so this fails instead of skipping", msg)
		}
		t.Skip(msg)
	}
	slices.Sort(bins)
	dir, err := os.MkdirTemp("", "pgoutbox-server-")
	if err != nil {
		t.Fatalf("pgserver: %v", err)
	}
	s := &pgServer{t: t, bin: filepath.Dir(bins[len(bins)-1]), dir: dir, port: testenv.FreePort(t)}
	t.Cleanup(func() {
		s.stop()
		_ = os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("pgserver: PostgreSQL refuses to run as root, and there is no postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatalf("pgserver: %v", err)
		}
	}
	return s
}

func (s *pgServer) data() string { return filepath.Join(s.dir, "data") }

// DSN is the server's connection string.
func (s *pgServer) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// Start starts the server and waits until it accepts connections.
func (s *pgServer) Start() {
	s.t.Helper()
	s.run("pg_ctl", "-D", s.data(), "-l", filepath.Join(s.dir, "log"), "-w", "-t", "60",
		"-o", fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1", s.port, s.dir), "start")
}

// Kill stops the server at once, as a crash would: no checkpoint, the next
// start recovers from the write-ahead log.
func (s *pgServer) Kill() {
	s.t.Helper()
	s.run("pg_ctl", "-D", s.data(), "-m", "immediate", "-w", "stop")
}

func (s *pgServer) stop() {
	_ = s.command("pg_ctl", "-D", s.data(), "-m", "immediate", "-w", "stop").Run()
}

func (s *pgServer) run(name string, args ...string) {
	s.t.Helper()
	if out, err := s.command(name, args...).CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		s.t.Fatalf("pgserver: %s %v: %v\n%s\n%s", name, args, err, out, log)
	}
}

// command runs a program of the server's, as the postgres user when the
// test runs as root.
func (s *pgServer) command(name string, args ...string) *exec.Cmd {
	path := filepath.Join(s.bin, name)
	if os.Geteuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}
