package pgtest_test

import (
	"testing"

	"github.com/dedup-go/dedup/internal/pgtest"
)

// TestServer: a server of the test's own accepts connections once
// started, none once killed, and again once started again on its data.
func TestServer(t *testing.T) {
	s := pgtest.Start(t)
	if !s.Ready() {
		t.Fatalf("the server on port %d does not accept connections after Start", s.Port())
	}
	s.Kill()
	if s.Ready() {
		t.Fatal("the server accepts connections after Kill")
	}
	s.Start()
	if !s.Ready() {
		t.Fatal("the server does not accept connections after a second Start")
	}
}
