package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	childModeEnv = "TESTENV_CHILD_MODE"
	childMark    = "TESTENV-CHILD "
)

// TestChildHelper is the child process of the Child tests (it skips
// unless one of them started it): it reports "ready", then does what its
// mode says.
func TestChildHelper(t *testing.T) {
	mode := os.Getenv(childModeEnv)
	if mode == "" {
		t.Skip("the child process of the Child tests")
	}
	fmt.Printf("%sready\n", childMark)
	switch mode {
	case "fail":
		fmt.Println("the child's own failure: the database refused the connection")
		os.Exit(1)
	case "chatty": // more reports than the channel holds, then blocks
		for i := range 100 {
			fmt.Printf("%sreport %d\n", childMark, i)
		}
		select {}
	case "parent":
		ExitWithParent()
		select {} // until its input ends
	default: // "block": until killed
		select {}
	}
}

// fatalTB records the first Fatalf and ends the goroutine that called it,
// as a test's FailNow does.
type fatalTB struct {
	testing.TB
	mu       sync.Mutex
	msg      string
	cleanups []func()
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fatalTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }

// await runs c.Await on a fatalTB and returns what it failed with ("" for
// no failure).
func await(c *Child, what string) string {
	f := &fatalTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Await(f, what)
	}()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.msg
}

// TestChildReportsAndIsKilled: a child's marked lines are awaited in
// order, others are passed over, and Kill ends it.
func TestChildReportsAndIsKilled(t *testing.T) {
	c := StartChild(t, "^TestChildHelper$", []string{childModeEnv + "=block"}, childMark)
	c.Await(t, "ready")
	c.Kill(t)
	Recv(t, c.done, "the child reaped")
	var ee *exec.ExitError
	if !errors.As(c.err, &ee) || ee.ProcessState.Exited() {
		t.Fatalf("the killed child ended with %v, want a signal", c.err)
	}
	c.Kill(t) // a second Kill does nothing
}

// TestChildEndsBeforeReport: a child that ends before it reported what
// was awaited fails the wait at once, with how it ended and its own
// output, not after a timeout.
func TestChildEndsBeforeReport(t *testing.T) {
	c := StartChild(t, "^TestChildHelper$", []string{childModeEnv + "=fail"}, childMark)
	c.Await(t, "ready")
	msg := await(c, "at the kill point")
	for _, want := range []string{"ended (exit status 1)", "before it reported at the kill point", "the database refused the connection"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the failure %q does not say %q", msg, want)
		}
	}
}

// TestChildExitsWithParent: a child that called ExitWithParent ends once
// its input ends, as when the test that started it is gone.
func TestChildExitsWithParent(t *testing.T) {
	c := StartChild(t, "^TestChildHelper$", []string{childModeEnv + "=parent"}, childMark)
	c.Await(t, "ready")
	if err := c.stdin.Close(); err != nil {
		t.Fatal(err)
	}
	Recv(t, c.done, "the child to exit once its input ended")
	var ee *exec.ExitError
	if !errors.As(c.err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("the child ended with %v, want exit status 3", c.err)
	}
}

// TestChildKilledWithReportsUnread: a child that reported more than
// anybody awaited is still killed and reaped.
func TestChildKilledWithReportsUnread(t *testing.T) {
	c := StartChild(t, "^TestChildHelper$", []string{childModeEnv + "=chatty"}, childMark)
	c.Await(t, "ready")
	deadline := time.Now().Add(WaitTimeout)
	for len(c.lines) < cap(c.lines) { // the reader is held by a full channel
		if time.Now().After(deadline) {
			t.Fatalf("the child's reports did not fill the channel within %v", WaitTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.Kill(t)
	Recv(t, c.done, "the child reaped")
}
