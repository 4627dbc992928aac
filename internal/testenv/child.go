package testenv

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// childTail is how many lines of a child's other output Child keeps, to
// show when it ends unexpectedly.
const childTail = 40

// Child is this test binary run again as a process of the test's own
// (running one test, which tells it apart by its environment), which the
// test may kill at any moment. The child reports progress by lines of
// its standard output that start with the marker; its other output (its
// own test's failure, for one) is kept and shown when it ends before it
// reported what was awaited. Its standard input stays open while the test
// runs: a child that calls ExitWithParent ends when the test that started
// it is gone, however it ended.
type Child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{} // closed once the process was reaped

	mu   sync.Mutex
	tail []string // the last lines of its other output
	err  error    // how it ended, once done
}

// StartChild runs this test binary's test named run (a -test.run pattern)
// in a process of its own, with env added to the test's environment; its
// standard error is the test's. It is killed, if still running, when t
// ends.
func StartChild(t testing.TB, run string, env []string, marker string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("child: %v", err)
	}
	c := &Child{cmd: cmd, stdin: stdin, lines: make(chan string, 16), done: make(chan struct{})}
	go c.read(out, marker)
	t.Cleanup(func() { c.Kill(t) })
	return c
}

// read passes the marked lines on and keeps the tail of the others, until
// the output ends; then it reaps the process.
func (c *Child) read(out io.Reader, marker string) {
	defer close(c.done)
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), marker); ok {
			c.lines <- line
			continue
		}
		c.mu.Lock()
		c.tail = append(c.tail, sc.Text())
		if len(c.tail) > childTail {
			c.tail = c.tail[len(c.tail)-childTail:]
		}
		c.mu.Unlock()
	}
	close(c.lines)
	_, _ = io.Copy(io.Discard, out)
	err := c.cmd.Wait()
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
}

// Await waits until the child reports a line that starts with what,
// failing t when it does not within WaitTimeout, or ends first (with how
// it ended and the tail of its output).
func (c *Child) Await(t testing.TB, what string) {
	t.Helper()
	for {
		line, ok := recvLine(t, c.lines, "the child process to report "+what)
		if !ok {
			Recv(t, c.done, "the child process to be reaped")
			c.mu.Lock()
			defer c.mu.Unlock()
			t.Fatalf("the child process ended (%v) before it reported %s; its output ended with:\n%s",
				c.err, what, strings.Join(c.tail, "\n"))
		}
		if strings.HasPrefix(line, what) {
			return
		}
	}
}

// Kill kills the child with SIGKILL, if it still runs, and reaps it.
func (c *Child) Kill(t testing.TB) {
	t.Helper()
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	_ = c.stdin.Close()
	// Its reports nobody awaited are dropped, so that the reader, which
	// reaps it, is never held by a full channel.
	timer := time.NewTimer(WaitTimeout)
	defer timer.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-c.lines:
		case <-timer.C:
			t.Fatalf("timed out after %v waiting for the killed child process to be reaped", WaitTimeout)
		}
	}
}

// recvLine receives from ch as Recv does, and reports whether ch was
// open.
func recvLine(t testing.TB, ch <-chan string, what string) (string, bool) {
	t.Helper()
	timer := time.NewTimer(WaitTimeout)
	defer timer.Stop()
	select {
	case v, ok := <-ch:
		return v, ok
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", WaitTimeout, what)
		panic("unreachable")
	}
}

// ExitWithParent, called in a child process, ends it (exit status 3) once
// its standard input ends: the test that started it closed it, or is gone.
func ExitWithParent() {
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		fmt.Fprintln(os.Stderr, "child: the parent test is gone; exiting")
		os.Exit(3)
	}()
}
