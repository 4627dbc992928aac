package testenv

import (
	"net"
	"strconv"
	"testing"
)

func TestHostPort(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:6379":         "127.0.0.1:6379",
		"nats://127.0.0.1:4222":  "127.0.0.1:4222",
		"redis://user@host:6380": "host:6380",
	} {
		got, err := hostPort(in)
		if err != nil || got != want {
			t.Errorf("hostPort(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := hostPort("nats://127.0.0.1"); err == nil {
		t.Error("a URL without a port is an error")
	}
}

// TestAddr: a listening service is found; an unreachable one skips the
// test, unless DEDUP_TEST_REQUIRE=1 (not tested here: it fails the test).
func TestAddr(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	svc := Service{Name: "Test", Env: "DEDUP_TEST_TESTENV", Default: "127.0.0.1:1", Start: "nothing"}

	t.Setenv("DEDUP_TEST_TESTENV", l.Addr().String())
	if got := svc.Addr(t); got != l.Addr().String() {
		t.Fatalf("Addr = %q, want the listener %q", got, l.Addr())
	}

	t.Setenv("DEDUP_TEST_REQUIRE", "")
	t.Setenv("DEDUP_TEST_TESTENV", "127.0.0.1:"+strconv.Itoa(FreePort(t)))
	var skipped bool
	t.Run("unreachable", func(t *testing.T) {
		t.Cleanup(func() { skipped = t.Skipped() })
		svc.Addr(t)
		t.Error("Addr returned for an unreachable service")
	})
	if !skipped {
		t.Error("an unreachable service should skip the test")
	}
}
