package mysqlstore_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dedup-go/dedup/internal/testenv"
)

// mariadbServer is a MariaDB server of the test's own, on a free loopback
// port, which the test may kill and start again (the shared one is never
// touched). Its data lives in a temporary folder; it runs without grant
// tables, so any user connects with every privilege.
type mariadbServer struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

// startMariaDB runs mariadb-install-db and starts the server; it is killed
// and its folder removed when t ends.
func startMariaDB(t testing.TB) *mariadbServer {
	t.Helper()
	const install = "scripts/services.sh mariadb (apt-get install mariadb-server)"
	bin := testenv.Binary(t, "mariadbd", install)
	installDB := testenv.Binary(t, "mariadb-install-db", install)
	dir, err := os.MkdirTemp("", "mysqlstore-server-")
	if err != nil {
		t.Fatalf("mariadb: %v", err)
	}
	s := &mariadbServer{t: t, bin: bin, dir: dir, port: testenv.FreePort(t)}
	t.Cleanup(func() {
		s.Kill()
		_ = os.RemoveAll(dir)
	})
	args := []string{"--no-defaults", "--datadir=" + s.data(), "--auth-root-authentication-method=normal", "--skip-test-db"}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	if out, err := exec.Command(installDB, args...).CombinedOutput(); err != nil {
		t.Fatalf("mariadb: mariadb-install-db: %v\n%s", err, out)
	}
	s.Start()
	return s
}

func (s *mariadbServer) data() string { return filepath.Join(s.dir, "data") }

// Config is the driver's config of the server.
func (s *mariadbServer) Config() *mysql.Config {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	cfg.Timeout = 2 * time.Second
	return cfg
}

// Start starts the server (recovering from a crash, after Kill) and waits
// until it accepts connections.
func (s *mariadbServer) Start() {
	s.t.Helper()
	args := []string{"--no-defaults", "--datadir=" + s.data(), "--port=" + strconv.Itoa(s.port), "--bind-address=127.0.0.1",
		"--socket=" + filepath.Join(s.dir, "sock"), "--pid-file=" + filepath.Join(s.dir, "pid"), "--skip-grant-tables",
		"--innodb-buffer-pool-size=32M", "--log-error=" + filepath.Join(s.dir, "log")}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	s.cmd = exec.Command(s.bin, args...)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("mariadb: start: %v", err)
	}
	done := make(chan struct{})
	s.done = done
	cmd := s.cmd
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	deadline := time.Now().Add(testenv.WaitTimeout)
	for {
		if conn, err := net.DialTimeout("tcp", s.Config().Addr, time.Second); err == nil {
			_ = conn.Close()
			return
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
			s.t.Fatalf("mariadb: the server exited at start:\n%s", log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("mariadb: the server did not accept connections on port %d within %v", s.port, testenv.WaitTimeout)
		}
	}
}

// Kill kills the server with SIGKILL, as a crash would (the next start
// recovers from InnoDB's redo log), and waits for it to exit.
func (s *mariadbServer) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-s.done:
	case <-time.After(testenv.WaitTimeout):
		s.t.Errorf("mariadb: the server (pid %d) did not exit after SIGKILL", s.cmd.Process.Pid)
	}
	s.cmd = nil
}
