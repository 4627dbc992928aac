//go:build unix

package dedupnats

import (
	"syscall"
	"time"
)

// processCPU is the CPU time this process has used so far, user and
// system, on every thread (GC workers included). On a shared machine it
// measures work where wall time measures the neighbours too.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
