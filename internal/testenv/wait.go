package testenv

import (
	"sync"
	"testing"
	"time"
)

// WaitTimeout bounds every wait of Recv and Wait: a regression fails the
// test in seconds instead of hanging until go test's own timeout, and a
// busy machine is still given ample time.
const WaitTimeout = 30 * time.Second

// Recv receives from ch, failing t when nothing comes within WaitTimeout.
// what says what was awaited.
func Recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(WaitTimeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", WaitTimeout, what)
		panic("unreachable")
	}
}

// Wait waits for wg, failing t when it is not done within WaitTimeout.
func Wait(t testing.TB, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	Recv(t, done, what)
}
