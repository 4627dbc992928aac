// Package testenv finds the local services that dedup's tests talk to.
//
// A test asks for a service by name and gets its address, or is skipped with
// a message saying how to start it. When DEDUP_TEST_REQUIRE=1 (what CI sets)
// an unreachable service fails the test instead, so that a suite that could
// not run never passes silently.
package testenv

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

// Service names a local service and where the tests look for it.
type Service struct {
	// Name is how the service is called in messages ("Redis").
	Name string
	// Env is the variable that overrides Default.
	Env string
	// Default is the address used when Env is unset: host:port, or a URL.
	Default string
	// Start says how to bring the service up.
	Start string
}

// The services of the suite, on their standard local ports.
var (
	Redis = Service{
		Name:    "Redis",
		Env:     "DEDUP_TEST_REDIS",
		Default: "127.0.0.1:6379",
		Start:   "scripts/services.sh redis",
	}
	NATS = Service{
		Name:    "NATS",
		Env:     "DEDUP_TEST_NATS",
		Default: "nats://127.0.0.1:4222",
		Start:   "scripts/services.sh nats",
	}
	RabbitMQ = Service{
		Name:    "RabbitMQ",
		Env:     "DEDUP_TEST_AMQP",
		Default: "amqp://guest:guest@127.0.0.1:5672/",
		Start:   "scripts/services.sh rabbitmq",
	}
	Postgres = Service{
		Name:    "PostgreSQL",
		Env:     "DEDUP_TEST_POSTGRES",
		Default: "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
		Start:   "scripts/services.sh postgres",
	}
)

// Required reports whether unreachable services fail tests instead of
// skipping them (DEDUP_TEST_REQUIRE=1).
func Required() bool { return os.Getenv("DEDUP_TEST_REQUIRE") == "1" }

// Addr returns the service's address (Env if set, else Default) after
// checking that something accepts connections there. When nothing does, it
// skips t, or fails it under DEDUP_TEST_REQUIRE=1.
func (s Service) Addr(t testing.TB) string {
	t.Helper()
	addr := s.Default
	if v := os.Getenv(s.Env); v != "" {
		addr = v
	}
	hostport, err := hostPort(addr)
	if err == nil {
		var conn net.Conn
		conn, err = net.DialTimeout("tcp", hostport, 2*time.Second)
		if err == nil {
			_ = conn.Close()
			return addr
		}
	}
	msg := fmt.Sprintf("%s is not reachable at %s (%v): start it with %s, or point %s at one",
		s.Name, addr, err, s.Start, s.Env)
	if Required() {
		t.Fatalf("%s; DEDUP_TEST_REQUIRE=1, so this fails instead of skipping", msg)
	}
	t.Skip(msg)
	return ""
}

// hostPort extracts host:port from an address that may be a URL.
func hostPort(addr string) (string, error) {
	if !strings.Contains(addr, "://") {
		return addr, nil
	}
	u, err := url.Parse(addr)
	if err != nil {
		return "", fmt.Errorf("parse %q: %w", addr, err)
	}
	if u.Port() == "" {
		return "", fmt.Errorf("%q has no port", addr)
	}
	return u.Host, nil
}

// Binary returns the path of the program name, or skips t (fails it under
// DEDUP_TEST_REQUIRE=1) when it is not installed. Tests that start their own
// server (a redis-server to kill) use it.
func Binary(t testing.TB, name, install string) string {
	t.Helper()
	path, err := lookPath(name)
	if err == nil {
		return path
	}
	msg := fmt.Sprintf("%s is not installed (%v): install it with %s", name, err, install)
	if Required() {
		t.Fatalf("%s; DEDUP_TEST_REQUIRE=1, so this fails instead of skipping", msg)
	}
	t.Skip(msg)
	return ""
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
